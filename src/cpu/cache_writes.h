// Internal: the CPU implementations of the cache writes (validated arguments only).
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "core/page_run.h"
#include "core/problem.h"

namespace pagedattn::cpu {

// New tokens' keys or values: token t, head h, dim d at data + t * token_stride +
// h * head_stride + d * dim_stride (elements).
struct TokenRows {
  const std::byte* data = nullptr;
  DType dtype = DType::kF32;
  std::int64_t token_stride = 0, head_stride = 0, dim_stride = 1;
};

// slots[i] = page * page_size + offset, or -1 to skip token i.
void append_kv(const detail::KVCacheAccess& kv, const TokenRows& k, const TokenRows& v,
               std::span<const std::int64_t> slots, int num_threads);

// Copies every (src, dst) page of both K and V.
void copy_blocks(const detail::KVCacheAccess& kv,
                 std::span<const std::pair<std::int64_t, std::int64_t>> mapping, int num_threads);

// swap_blocks between two caches in host memory: each run's pages, one memcpy each.
void copy_page_runs(std::span<const detail::PageRun> runs);

}  // namespace pagedattn::cpu
