// Internal: a run of whole pages to copy between two caches (swap_blocks).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagedattn::detail {

// `pages` consecutive pages of one cache tensor copied to another: page i's `bytes` from
// src + i * src_pitch to dst + i * dst_pitch. Either side may be host or device memory.
struct PageRun {
  const std::byte* src = nullptr;
  std::byte* dst = nullptr;
  std::int64_t src_pitch = 0, dst_pitch = 0, bytes = 0, pages = 0;
};

}  // namespace pagedattn::detail
