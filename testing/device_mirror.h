// GPU copies of host tensors, for running the library's CUDA ops on data built in host memory
// (`verify --device cuda`, `demo --device cuda`). Built only with the CUDA backend.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "pagedattn/page_table.h"
#include "pagedattn/tensor.h"

namespace pagedattn::testing {

// Device memory of one buffer (cudaMalloc / cudaFree); errors throw Error(kCuda).
class DeviceBytes {
 public:
  explicit DeviceBytes(std::size_t bytes);
  ~DeviceBytes();
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t bytes_ = 0;
  void* ptr_ = nullptr;
};

// A host view's bytes (the span its elements reach, padding between them included) copied to
// GPU 0, and the same view over the copy. An undefined view stays undefined.
class DeviceMirror {
 public:
  explicit DeviceMirror(const TensorView& host);
  const TensorView& view() const { return view_; }
  // Copies the device bytes back over the host view's span.
  void download(const TensorView& host) const;
  // The device bytes equal the host view's span.
  bool matches(const TensorView& host) const;

 private:
  std::unique_ptr<DeviceBytes> bytes_;
  TensorView view_;
};

// A page table's tensors mirrored, in the same format.
class TableMirror {
 public:
  explicit TableMirror(const PageTable& host);
  const PageTable& table() const { return table_; }

 private:
  std::vector<std::unique_ptr<DeviceMirror>> parts_;
  PageTable table_;
};

// Waits for every stream of the current GPU; errors throw Error(kCuda) naming `what`.
void synchronize_device(const char* what);

}  // namespace pagedattn::testing
