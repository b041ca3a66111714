// Internal: the cache writes on CUDA (append_kv, copy_blocks, swap_blocks). src/core/cache_ops.cpp has
// validated every argument, index values included (on the caller's host copies); every pointer
// here is a device pointer. The launches only enqueue work on `stream`: no synchronisation and
// no allocation, so they can be captured in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/page_run.h"
#include "core/problem.h"

namespace pagedattn::cuda {

// New tokens' keys or values on the device: token t, head h, dim d at
// data + (t * token_stride + h * head_stride + d * dim_stride) elements of `dtype`.
struct TokenRows {
  const std::byte* data = nullptr;
  DType dtype = DType::kF32;
  std::int64_t token_stride = 0, head_stride = 0, dim_stride = 1;
};

// An i32 or i64 index tensor on the device (rank 1 or 2): element (i, j) at
// data + (i * stride0 + j * stride1) elements.
struct IndexView {
  const void* data = nullptr;
  DType dtype = DType::kI64;
  std::int64_t stride0 = 0, stride1 = 0;

  PAGEDATTN_HD std::int64_t at(std::int64_t i, std::int64_t j = 0) const {
    const std::int64_t e = i * stride0 + j * stride1;
    return dtype == DType::kI32 ? static_cast<const std::int32_t*>(data)[e]
                                : static_cast<const std::int64_t*>(data)[e];
  }
};

// Writes token t's K/V rows into slot slots.at(t) (page * page_size + offset; -1 skips the
// token), t in [0, num_tokens). Bytes written equal the CPU backend's for the same arguments.
void append_kv(const detail::KVCacheAccess& kv, const TokenRows& k, const TokenRows& v,
               const IndexView& slots, std::int64_t num_tokens, void* stream);

// Copies page mapping.at(i, 0) onto page mapping.at(i, 1), K and V, i in [0, num_pairs).
void copy_blocks(const detail::KVCacheAccess& kv, const IndexView& mapping,
                 std::int64_t num_pairs, void* stream);

// swap_blocks: each run as one cudaMemcpy2DAsync (any direction: unified addressing), enqueued
// on `stream`. Host memory that is not page-locked makes the copies wait for the host.
void copy_page_runs(std::span<const detail::PageRun> runs, void* stream);

}  // namespace pagedattn::cuda
