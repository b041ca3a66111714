// Internal: the one test of whether a cache tensor's pages are dense blocks, shared by every
// whole-page copy (copy_blocks on the CPU and on CUDA, swap_blocks) so that all of them copy the
// same bytes.
#pragma once

#include "core/problem.h"

namespace pagedattn::detail {

// Every page of `t` is one dense block of page_size x num_kv_heads x head_dim elements starting
// at the page's offset (every layout as KVCacheSpec::make_views and PagedKV::from_stacked give it).
inline bool dense_pages(const KVTensorAccess& t, const KVCacheAccess& kv) {
  const std::int64_t page_elems = kv.page_size * kv.num_kv_heads * kv.head_dim;
  return t.offset(0, kv.num_kv_heads - 1, kv.page_size - 1, kv.head_dim - 1) == page_elems - 1 &&
         t.head_stride > 0 && t.token_stride > 0 && t.elem_stride > 0;
}

}  // namespace pagedattn::detail
