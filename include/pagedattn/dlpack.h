// pagedattn — tensor views to and from DLPack, the tensor exchange of PyTorch, JAX, CuPy and
// NumPy: a framework's tensor reaches the ops without a copy, and a view goes back the same way.
// Needs the DLPack header (Debian: libdlpack-dev; the CMake package links dlpack::dlpack).
#pragma once

#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>
#include <optional>

#include "pagedattn/tensor.h"

namespace pagedattn {

// A view of `t`'s memory, its byte_offset applied (null strides: row-major). Dtypes: float
// 32 / 16, bfloat 16, int 32 / 64. DLPack 0.6 has no fp8 codes, so fp8 data comes as uint8 and
// `fp8` says which fp8 format its bytes hold. Devices: CPU, page-locked host memory (kDLCUDAHost)
// as the CPU, CUDA and CUDA managed memory as that GPU. Other dtypes or devices, vector lanes,
// more than TensorView::kMaxRank dimensions and null pointers where data is needed throw Error
// naming what.
TensorView from_dlpack(const DLTensor& t, std::optional<DType> fp8 = std::nullopt);

// A DLTensor over a view's memory, for a framework to import (non-owning: the memory must
// outlive it). fp8 views export as uint8. The DLTensor's shape and strides point into this
// object; a copy points into the copy. An undefined view throws Error.
class DLPackView {
 public:
  explicit DLPackView(const TensorView& view);
  DLPackView(const DLPackView& other);
  DLPackView& operator=(const DLPackView& other);
  const DLTensor& tensor() const { return tensor_; }

 private:
  void point_into_this();

  std::array<std::int64_t, TensorView::kMaxRank> shape_{}, strides_{};
  DLTensor tensor_{};
};

}  // namespace pagedattn
