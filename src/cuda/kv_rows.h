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

// True when V is stored transposed (vLLM's split layout: each dim's slots of a page in a run)
// in 16-byte runs: page size, strides and the base all multiples of a run (8 16-bit or 16 fp8
// elements), so that a page holds whole runs of every dim.
inline bool v_runs_vectorisable(const detail::KVCacheAccess& kv) {
  const detail::KVTensorAccess& v = kv.v;
  const std::int64_t run = elements_per_copy(kv.dtype);
  return v.token_stride == 1 && kv.page_size % run == 0 && v.page_stride % run == 0 && v.head_stride % run == 0 &&
         v.elem_stride % run == 0 && v.chunk_len >= kv.head_dim && reinterpret_cast<std::uintptr_t>(v.data) % 16 == 0;
}

}  // namespace pagedattn::cuda
