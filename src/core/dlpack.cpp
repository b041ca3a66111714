// Tensor views to and from DLPack (pagedattn/dlpack.h).
#include "pagedattn/dlpack.h"

#include <string>

#include "pagedattn/error.h"

namespace pagedattn {

namespace {

std::string describe(DLDataType t) {
  return "code " + std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits, " + std::to_string(t.lanes) +
         " lanes";
}

DType dtype_of(DLDataType t, std::optional<DType> fp8) {
  check_arg(t.lanes == 1, [&] { return "DLPack tensor has vector lanes (" + describe(t) + "); expected 1 lane"; });
  if (fp8) {
    check_arg(is_fp8(*fp8), [&] { return "fp8 names " + std::string(to_string(*fp8)) + ", not an fp8 dtype"; });
    check_arg(t.code == kDLUInt && t.bits == 8, [&] {
      return "an fp8 DLPack tensor comes as uint8 (DLPack 0.6 has no fp8 codes); got " + describe(t);
    });
    return *fp8;
  }
  if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  if (t.code == kDLInt && t.bits == 32) return DType::kI32;
  if (t.code == kDLInt && t.bits == 64) return DType::kI64;
  throw Error(ErrorCode::kUnsupported,
              "DLPack dtype " + describe(t) + " has no pagedattn dtype (f32, f16, bf16, i32, i64; fp8 as uint8 with `fp8`)");
}

Device device_of(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost: return Device::cpu();
    case kDLCUDA:
    case kDLCUDAManaged: return Device::cuda(d.device_id);
    default:
      throw Error(ErrorCode::kUnsupported, "DLPack device type " + std::to_string(static_cast<int>(d.device_type)) +
                                               " is neither the CPU nor a CUDA GPU");
  }
}

DLDataType dl_dtype_of(DType t) {
  switch (t) {
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kF8E4M3:
    case DType::kF8E5M2: return {kDLUInt, 8, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
  }
  return {kDLUInt, 8, 1};
}

}  // namespace

TensorView from_dlpack(const DLTensor& t, std::optional<DType> fp8) {
  check_arg(t.ndim >= 0 && t.ndim <= TensorView::kMaxRank, [&] {
    return "DLPack tensor has " + std::to_string(t.ndim) + " dimensions; pagedattn views take 0 to " +
           std::to_string(TensorView::kMaxRank);
  });
  check_arg(t.ndim == 0 || t.shape != nullptr, "DLPack tensor has dimensions but a null shape");
  const DType dtype = dtype_of(t.dtype, fp8);
  const Device device = device_of(t.device);
  const auto rank = static_cast<std::size_t>(t.ndim);
  std::array<std::int64_t, TensorView::kMaxRank> shape{}, strides{};
  // numel: the elements of dimensions d and after, the row-major stride of dimension d - 1. A
  // product past int64 wrapped, to 0 for [2^40, 2^20, 1, 16], and a null data pointer passed
  // the check below; so, as TensorView counts them, the non-zero sizes must multiply within int64.
  std::int64_t numel = 1, nonzero = 1;
  for (std::size_t d = rank; d-- > 0;) {
    shape[d] = t.shape[d];
    check_arg(shape[d] >= 0, [&] { return "DLPack tensor has a negative size in dimension " + std::to_string(d); });
    check_arg(shape[d] == 0 || !__builtin_mul_overflow(nonzero, shape[d], &nonzero), [&] {
      std::string s = "DLPack tensor of shape [";
      for (std::size_t i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
      return s + "] has more elements than an int64 counts";
    });
    strides[d] = t.strides != nullptr ? t.strides[d] : numel;
    numel *= shape[d];  // within int64: at most `nonzero`
  }
  check_arg(numel == 0 || t.data != nullptr, "DLPack tensor has elements but a null data pointer");
  void* data = t.data == nullptr ? nullptr : static_cast<std::byte*>(t.data) + t.byte_offset;
  return TensorView(data, dtype, std::span(shape.data(), rank), std::span(strides.data(), rank), device);
}

DLPackView::DLPackView(const TensorView& view) {
  // An undefined view would export as a 0-d tensor (one element) over a null pointer.
  check_arg(view.defined(), "DLPackView: the view is undefined (no data and no shape)");
  for (int d = 0; d < view.rank(); ++d) {
    shape_[static_cast<std::size_t>(d)] = view.size(d);
    strides_[static_cast<std::size_t>(d)] = view.stride(d);
  }
  tensor_.data = view.data();
  const Device dev = view.device();
  tensor_.device = {dev.type == DeviceType::kCUDA ? kDLCUDA : kDLCPU, dev.index};
  tensor_.ndim = view.rank();
  tensor_.dtype = dl_dtype_of(view.dtype());
  tensor_.byte_offset = 0;
  point_into_this();
}

DLPackView::DLPackView(const DLPackView& other)
    : shape_(other.shape_), strides_(other.strides_), tensor_(other.tensor_) {
  point_into_this();
}

DLPackView& DLPackView::operator=(const DLPackView& other) {
  shape_ = other.shape_;
  strides_ = other.strides_;
  tensor_ = other.tensor_;
  point_into_this();
  return *this;
}

void DLPackView::point_into_this() {
  tensor_.shape = shape_.data();
  tensor_.strides = strides_.data();
}

}  // namespace pagedattn
