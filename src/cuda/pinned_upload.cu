#include "cuda/pinned_upload.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "cuda/cuda_check.h"

namespace pagedattn::cuda {

namespace {

// Enough buffers that the host waits only on a copy several calls old (long done when the
// calls' kernels take more than the copies).
constexpr std::size_t kBuffers = 4;
constexpr std::size_t kMinBufferBytes = std::size_t{64} << 10;

struct StagingBuffer {
  void* host = nullptr;
  std::size_t capacity = 0;
  cudaEvent_t copied = nullptr;  // recorded after the buffer's last copy
};

struct StagingRing {
  std::array<StagingBuffer, kBuffers> buffers;
  std::size_t next = 0;
  StagingRing() = default;
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;
  StagingRing(StagingRing&& other) noexcept : buffers(other.buffers), next(other.next) { other.buffers = {}; }
  ~StagingRing() {  // errors ignored: at process exit the runtime may be gone already
    for (StagingBuffer& b : buffers) {
      if (b.copied != nullptr) cudaEventSynchronize(b.copied), cudaEventDestroy(b.copied);
      if (b.host != nullptr) cudaFreeHost(b.host);
    }
  }
};

}  // namespace

void upload_staged(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  thread_local std::vector<StagingRing> per_device;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "current device");
  if (per_device.size() <= static_cast<std::size_t>(device)) per_device.resize(static_cast<std::size_t>(device) + 1);
  StagingRing& ring = per_device[static_cast<std::size_t>(device)];
  StagingBuffer& b = ring.buffers[ring.next];
  ring.next = (ring.next + 1) % kBuffers;
  if (b.copied != nullptr) check_cuda(cudaEventSynchronize(b.copied), "staging buffer reuse");
  if (b.copied == nullptr) check_cuda(cudaEventCreateWithFlags(&b.copied, cudaEventDisableTiming), "staging event");
  if (b.capacity < bytes) {
    if (b.host != nullptr) check_cuda(cudaFreeHost(b.host), "staging buffer");
    b.host = nullptr;
    b.capacity = 0;
    const std::size_t capacity = std::max(kMinBufferBytes, bytes + bytes / 2);
    check_cuda(cudaMallocHost(&b.host, capacity), "staging buffer");
    b.capacity = capacity;
  }
  std::memcpy(b.host, src, bytes);
  check_cuda(cudaMemcpyAsync(dst, b.host, bytes, cudaMemcpyHostToDevice, stream), "staged upload");
  check_cuda(cudaEventRecord(b.copied, stream), "staged upload");
}

}  // namespace pagedattn::cuda
