#include "cuda/pinned_upload.h"

#include <algorithm>
#include <array>
#include <cstdint>
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
  void* device_view = nullptr;  // `host` as the GPU addresses it
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

// The copy from the staging buffer, read by the GPU straight from host memory (page-locked
// memory is mapped into the device's address space). A DMA copy (cudaMemcpyAsync) of the same
// ~10 KB cost ~10 us between the previous kernel and the next one, the kernel ~5 (H100, the
// cascade benchmark's layout: docs/perf-notes.md, CUDA cascade v8).
__global__ void copy_from_host_kernel(unsigned char* dst, const unsigned char* src, std::size_t bytes) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t done = 0;
  if (((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) & 15) == 0) {
    const std::size_t n16 = bytes / 16;
    for (std::size_t i = first; i < n16; i += stride) {
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    }
    done = n16 * 16;
  }
  for (std::size_t i = done + first; i < bytes; i += stride) dst[i] = src[i];
}

constexpr int kCopyThreads = 256;
constexpr std::size_t kMaxCopyBlocks = 64;

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
    // Mapped into the device's address space (always, with unified addressing); else the DMA
    // copy below.
    if (cudaHostGetDevicePointer(&b.device_view, b.host, 0) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      b.device_view = nullptr;
    }
  }
  std::memcpy(b.host, src, bytes);
  if (b.device_view == nullptr) {
    check_cuda(cudaMemcpyAsync(dst, b.host, bytes, cudaMemcpyHostToDevice, stream), "staged upload");
  } else {
    const std::size_t units = (bytes + 15) / 16;
    const auto blocks = static_cast<unsigned>(std::min(kMaxCopyBlocks, (units + kCopyThreads - 1) / kCopyThreads));
    copy_from_host_kernel<<<blocks, kCopyThreads, 0, stream>>>(static_cast<unsigned char*>(dst),
                                                               static_cast<const unsigned char*>(b.device_view), bytes);
    check_launch("copy_from_host_kernel", stream);
  }
  check_cuda(cudaEventRecord(b.copied, stream), "staged upload");
}

}  // namespace pagedattn::cuda
