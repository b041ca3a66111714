// Internal: the op's device made current while the op plans and launches. Host code only,
// without CUDA headers, so that the dispatching code in core/ can hold one.
#pragma once

namespace pagedattn::cuda {

// Kernels run on the current device, which a caller may have left on another GPU than the
// op's context names: this switches to `device` and restores the caller's device after.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int device_ = 0, previous_ = 0;
};

}  // namespace pagedattn::cuda
