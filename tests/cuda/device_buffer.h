// Test helpers: owning GPU buffers and host<->device mirrors of tensor views.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <algorithm>
#include <vector>

#include "pagedattn/tensor.h"

namespace pagedattn::test {

// A std::runtime_error, not the library's Error, so a failing helper call is not taken for the
// error a bad-input test expects from an op.
inline void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

inline bool gpu_available() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) cuda_ok(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() { if (ptr_) cudaFree(ptr_); }
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host) { cuda_ok(cudaMemcpy(ptr_, host, bytes_, cudaMemcpyHostToDevice), "upload"); }
  void download(void* host) const { cuda_ok(cudaMemcpy(host, ptr_, bytes_, cudaMemcpyDeviceToHost), "download"); }
  std::vector<std::byte> snapshot() const {
    std::vector<std::byte> out(bytes_);
    if (bytes_) download(out.data());
    return out;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Bytes a view spans from its data pointer (non-negative strides).
inline std::size_t span_bytes(const TensorView& t) {
  if (!t.defined() || t.numel() == 0) return 0;
  const auto span = t.byte_span();
  return static_cast<std::size_t>(span[1] - reinterpret_cast<std::uintptr_t>(t.data()));
}

// Copies the memory behind a host view to a new device buffer and returns the same view
// (shape, strides) over it.
struct Mirrored {
  DeviceBuffer buffer;
  TensorView view;
};
inline Mirrored mirror(const TensorView& host, int device = 0) {
  Mirrored m;
  if (!host.defined()) return m;
  m.buffer = DeviceBuffer(std::max<std::size_t>(span_bytes(host), 1));
  if (span_bytes(host)) cuda_ok(cudaMemcpy(m.buffer.get(), host.data(), span_bytes(host), cudaMemcpyHostToDevice), "mirror");
  m.view = TensorView::rebind(host, m.buffer.get(), Device::cuda(device));
  return m;
}

}  // namespace pagedattn::test
