// Internal (CUDA host side): whether a cache's K or V rows can be copied in aligned vectors.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/problem.h"
#include "pagedattn/dtype.h"

namespace pagedattn::cuda {

// Elements of `dtype` in one 16-byte copy.
inline std::int64_t elements_per_copy(DType dtype) { return 16 / static_cast<std::int64_t>(dtype_size(dtype)); }

// True when elements [d, d + n) of every row are contiguous and 16-byte vectors of them (or n
// elements when smaller) are aligned, for d a multiple of n.
inline bool rows_vectorisable(const detail::KVTensorAccess& t, DType dtype, std::int64_t n) {
  const auto esize = static_cast<std::int64_t>(dtype_size(dtype));
  const bool contiguous = t.elem_stride == 1 && t.chunk_len % n == 0;
  const std::int64_t align_elems = std::min<std::int64_t>(n, 16 / esize);
  const bool aligned = reinterpret_cast<std::uintptr_t>(t.data) % (align_elems * esize) == 0 &&
                       t.page_stride % n == 0 && t.head_stride % n == 0 &&
                       t.token_stride % n == 0 && (t.chunk_stride % n == 0 || t.chunk_len == 0);
  return contiguous && aligned;
}

}  // namespace pagedattn::cuda
