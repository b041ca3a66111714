#include "pagedattn/tensor.h"

#include <algorithm>
#include <span>
#include <string>

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

namespace {

// "f32[2, 3]" for the messages of views not yet constructed (describe() needs the view).
std::string shape_text(DType dtype, std::span<const std::int64_t> shape) {
  std::string s(to_string(dtype));
  s += "[";
  for (std::size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

// Sizes come from callers (a DLPack capsule, a shape computed from a request), and a count
// that wraps, to 0 for [2^40, 2^20, 1, 16], let a null or short buffer pass every check that
// trusts numel(); the ops then wrote through it. So the product of the non-zero sizes must fit
// in int64: then no partial product does either, in any order (numel(), is_contiguous(), the
// row-major strides). Negative sizes are left to the ops' checks, which name the argument.
void check_count(DType dtype, std::span<const std::int64_t> shape) {
  std::int64_t count = 1;
  for (std::int64_t n : shape) {
    check_arg(n == 0 || !__builtin_mul_overflow(count, n, &count), [&] {
      return shape_text(dtype, shape) + " has more elements than an int64 counts (the product of its non-zero sizes "
                                        "overflows)";
    });
  }
}

// The bytes a non-empty view spans, (1 + sum of (size - 1) * |stride|) * element size, must
// fit in int64 too: byte_span() and the offsets of its elements are then exact.
void check_span(DType dtype, std::span<const std::int64_t> shape, std::span<const std::int64_t> strides) {
  for (std::int64_t n : shape) {
    if (n <= 0) return;  // nothing to address (or a negative size, which the ops reject)
  }
  std::int64_t span = 1;
  bool fits = true;
  for (std::size_t d = 0; d < shape.size() && fits; ++d) {
    std::int64_t extent = 0;
    fits = !__builtin_mul_overflow(shape[d] - 1, strides[d], &extent) &&
           (extent >= 0 || !__builtin_sub_overflow(0, extent, &extent)) &&
           !__builtin_add_overflow(span, extent, &span);
  }
  fits = fits && !__builtin_mul_overflow(span, static_cast<std::int64_t>(dtype_size(dtype)), &span);
  check_arg(fits, [&] {
    std::string s = shape_text(dtype, shape) + " strides [";
    for (std::size_t d = 0; d < strides.size(); ++d) s += (d ? ", " : "") + std::to_string(strides[d]);
    return s + "] spans more bytes than an int64 counts";
  });
}

}  // namespace

TensorView::TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                       Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
  check_arg(rank_ <= kMaxRank, [&] {
    return "tensor rank " + std::to_string(rank_) + " exceeds the maximum " + std::to_string(kMaxRank);
  });
  check_count(dtype, shape);
  std::copy(shape.begin(), shape.end(), shape_.begin());
  std::int64_t stride = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    strides_[static_cast<std::size_t>(d)] = stride;
    stride *= shape_[static_cast<std::size_t>(d)];
  }
  check_span(dtype, shape, std::span(strides_.data(), shape.size()));
}

TensorView::TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                       std::initializer_list<std::int64_t> strides, Device device)
    : TensorView(data, dtype, std::span(shape.begin(), shape.size()), std::span(strides.begin(), strides.size()),
                 device) {}

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
  check_count(dtype, shape);
  check_span(dtype, shape, strides);
  std::copy(shape.begin(), shape.end(), shape_.begin());
  std::copy(strides.begin(), strides.end(), strides_.begin());
}

std::int64_t TensorView::numel() const {
  // No overflow: the constructors checked the product (check_count), and slices only shrink it.
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
  // Past the rank the strides are stale (select() leaves them) and past kMaxRank they are not
  // there at all.
  check_arg(index.size() <= static_cast<std::size_t>(rank_), [&] {
    return "element_ptr got " + std::to_string(index.size()) + " indices for " + describe() +
           " (at most one per dimension)";
  });
  std::int64_t offset = 0;
  std::size_t d = 0;
  for (std::int64_t i : index) offset += i * strides_[d++];
  return static_cast<char*>(data_) + offset * static_cast<std::int64_t>(dtype_size(dtype_));
}

TensorView TensorView::slice(int dim, std::int64_t start, std::int64_t length) const {
  const int d = norm(dim);
  // Against size - length, not start + length, which overflows for starts near INT64_MAX; with
  // 0 <= length <= size the subtraction cannot.
  check_arg(d >= 0 && d < rank_ && length >= 0 && length <= shape_[static_cast<std::size_t>(d)] && start >= 0 &&
                start <= shape_[static_cast<std::size_t>(d)] - length,
            [&] {
              return "slice of length " + std::to_string(length) + " at " + std::to_string(start) + " of dimension " +
                     std::to_string(dim) + " is out of range for " + describe();
            });
  TensorView out = *this;
  out.data_ = static_cast<char*>(data_) + start * strides_[static_cast<std::size_t>(d)] *
                                               static_cast<std::int64_t>(dtype_size(dtype_));
  out.shape_[static_cast<std::size_t>(d)] = length;
  return out;
}

TensorView TensorView::select(int dim, std::int64_t index) const {
  const int nd = norm(dim);
  check_arg(nd >= 0 && nd < rank_ && index >= 0 && index < shape_[static_cast<std::size_t>(nd)], [&] {
    return "index " + std::to_string(index) + " of dimension " + std::to_string(dim) + " is out of range for " +
           describe();
  });
  TensorView out = slice(dim, index, 1);
  const auto d = static_cast<std::size_t>(nd);
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
