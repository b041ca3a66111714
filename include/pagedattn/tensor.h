// pagedattn — non-owning tensor views: {data, dtype, device, shape, strides}.
//
// Shapes and strides are in elements (not bytes). A default-constructed view is "absent":
// optional arguments (LSE output, ALiBi slopes, ...) are passed as TensorView{}.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "pagedattn/dtype.h"

namespace pagedattn {

enum class DeviceType : std::uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::kCPU, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  friend constexpr bool operator==(Device, Device) = default;
};

std::string to_string(Device d);

class TensorView {
 public:
  static constexpr int kMaxRank = 6;

  TensorView() = default;
  // A contiguous (row-major) view.
  TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
             Device device = Device::cpu());
  // A strided view; `strides` in elements, same length as `shape`.
  TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
             std::initializer_list<std::int64_t> strides, Device device = Device::cpu());
  // The same with a rank known at run time (at most kMaxRank).
  TensorView(void* data, DType dtype, std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
             Device device = Device::cpu());

  bool defined() const { return data_ != nullptr || rank_ > 0; }
  void* data() const { return data_; }
  template <class T>
  T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int rank() const { return rank_; }
  std::int64_t size(int dim) const { return shape_[static_cast<std::size_t>(norm(dim))]; }
  std::int64_t stride(int dim) const { return strides_[static_cast<std::size_t>(norm(dim))]; }
  std::int64_t numel() const;
  bool is_contiguous() const;
  // Address of the element at `index` (one coordinate per dimension).
  void* element_ptr(std::initializer_list<std::int64_t> index) const;

  // A view of the same memory with dimension `dim` restricted to [start, start + length).
  TensorView slice(int dim, std::int64_t start, std::int64_t length) const;
  // A view with dimension `dim` fixed at `index` (rank decreases by one).
  TensorView select(int dim, std::int64_t index) const;
  // Half-open byte range [first, last) this view can touch; {0,0} for an empty view.
  std::array<std::uintptr_t, 2> byte_span() const;

  // The same shape and strides over other memory (e.g. a copy of the data on another device).
  static TensorView rebind(const TensorView& like, void* data, Device device);

  // "bf16[16, 32, 128] strides [4096, 128, 1] cpu" — used in error messages.
  std::string describe() const;

 private:
  int norm(int dim) const { return dim < 0 ? dim + rank_ : dim; }

  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_{};
  int rank_ = 0;
  std::array<std::int64_t, kMaxRank> shape_{};
  std::array<std::int64_t, kMaxRank> strides_{};
};

}  // namespace pagedattn
