#include "pagedattn/tensor.h"

#include <algorithm>

#include "pagedattn/error.h"

namespace pagedattn {

std::string to_string(Device d) {
  return d.type == DeviceType::kCPU ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

std::string_view to_string(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "fp8_e4m3";
    case DType::kF8E5M2: return "fp8_e5m2";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2,
                  DType::kI32, DType::kI64}) {
    if (to_string(t) == name) return t;
  }
  throw Error(ErrorCode::kInvalidArgument,
              "unknown dtype '" + std::string(name) +
                  "' (expected one of f32, f16, bf16, fp8_e4m3, fp8_e5m2, i32, i64)");
}

TensorView::TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                       Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
  check_arg(rank_ <= kMaxRank, [&] {
    return "tensor rank " + std::to_string(rank_) + " exceeds the maximum " + std::to_string(kMaxRank);
  });
  std::copy(shape.begin(), shape.end(), shape_.begin());
  std::int64_t stride = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    strides_[static_cast<std::size_t>(d)] = stride;
    stride *= shape_[static_cast<std::size_t>(d)];
  }
}

TensorView::TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                       std::initializer_list<std::int64_t> strides, Device device)
    : TensorView(data, dtype, shape, device) {
  check_arg(strides.size() == shape.size(), [&] {
    return "tensor has " + std::to_string(shape.size()) + " dimensions but " + std::to_string(strides.size()) +
           " strides";
  });
  std::copy(strides.begin(), strides.end(), strides_.begin());
}

TensorView::TensorView(void* data, DType dtype, std::span<const std::int64_t> shape,
                       std::span<const std::int64_t> strides, Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
  check_arg(rank_ <= kMaxRank, [&] {
    return "tensor rank " + std::to_string(rank_) + " exceeds the maximum " + std::to_string(kMaxRank);
  });
  check_arg(strides.size() == shape.size(), [&] {
    return "tensor has " + std::to_string(shape.size()) + " dimensions but " + std::to_string(strides.size()) +
           " strides";
  });
  std::copy(shape.begin(), shape.end(), shape_.begin());
  std::copy(strides.begin(), strides.end(), strides_.begin());
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int d = 0; d < rank_; ++d) n *= shape_[static_cast<std::size_t>(d)];
  return n;
}

bool TensorView::is_contiguous() const {
  std::int64_t expected = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    const auto i = static_cast<std::size_t>(d);
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* TensorView::element_ptr(std::initializer_list<std::int64_t> index) const {
  std::int64_t offset = 0;
  std::size_t d = 0;
  for (std::int64_t i : index) offset += i * strides_[d++];
  return static_cast<char*>(data_) + offset * static_cast<std::int64_t>(dtype_size(dtype_));
}

TensorView TensorView::slice(int dim, std::int64_t start, std::int64_t length) const {
  const int d = norm(dim);
  check_arg(d >= 0 && d < rank_ && start >= 0 && length >= 0 && start + length <= shape_[static_cast<std::size_t>(d)],
            [&] {
              return "slice [" + std::to_string(start) + ", " + std::to_string(start + length) + ") of dimension " +
                     std::to_string(dim) + " is out of range for " + describe();
            });
  TensorView out = *this;
  out.data_ = static_cast<char*>(data_) + start * strides_[static_cast<std::size_t>(d)] *
                                               static_cast<std::int64_t>(dtype_size(dtype_));
  out.shape_[static_cast<std::size_t>(d)] = length;
  return out;
}

TensorView TensorView::select(int dim, std::int64_t index) const {
  TensorView out = slice(dim, index, 1);
  const auto d = static_cast<std::size_t>(norm(dim));
  for (std::size_t i = d; i + 1 < static_cast<std::size_t>(rank_); ++i) {
    out.shape_[i] = out.shape_[i + 1];
    out.strides_[i] = out.strides_[i + 1];
  }
  out.rank_ = rank_ - 1;
  return out;
}

std::array<std::uintptr_t, 2> TensorView::byte_span() const {
  if (numel() == 0 || data_ == nullptr) return {0, 0};
  std::int64_t lo = 0, hi = 0;  // element offsets relative to data_
  for (int d = 0; d < rank_; ++d) {
    const auto i = static_cast<std::size_t>(d);
    const std::int64_t extent = (shape_[i] - 1) * strides_[i];
    (extent < 0 ? lo : hi) += extent;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(data_);
  const auto esize = static_cast<std::int64_t>(dtype_size(dtype_));
  return {static_cast<std::uintptr_t>(static_cast<std::int64_t>(base) + lo * esize),
          static_cast<std::uintptr_t>(static_cast<std::int64_t>(base) + (hi + 1) * esize)};
}

TensorView TensorView::rebind(const TensorView& like, void* data, Device device) {
  TensorView out = like;
  out.data_ = data;
  out.device_ = device;
  return out;
}

std::string TensorView::describe() const {
  std::string s(to_string(dtype_));
  s += "[";
  for (int d = 0; d < rank_; ++d) s += (d ? ", " : "") + std::to_string(shape_[static_cast<std::size_t>(d)]);
  s += "] strides [";
  for (int d = 0; d < rank_; ++d) s += (d ? ", " : "") + std::to_string(strides_[static_cast<std::size_t>(d)]);
  s += "] " + to_string(device_);
  return s;
}

}  // namespace pagedattn
