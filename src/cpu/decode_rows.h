// Internal: the row lists and prefetch streams of the CPU decode kernel, shared by its Highway
// f32 path (decode.cpp) and its AVX512-BF16 path (decode_bf16.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace pagedattn::cpu {

inline constexpr std::int64_t kDecodeBlock = 64;  // keys per online-softmax step (logits in L1)
inline constexpr std::int64_t kDecodeCacheLine = 64;
inline constexpr std::int64_t kDecodeAhead = 8;  // tokens between a just-in-time L1 prefetch and use

// Row pointers of one block of consecutive keys.
struct BlockRows {
  const std::byte* k[kDecodeBlock];
  const std::byte* v[kDecodeBlock];
  std::int64_t n = 0;
};

// Prefetches of the K and V spans of rows [first, first + count) of a block, `bytes` from each
// row pointer, issued a few rows at a time while a block is computed.
struct PrefetchStream {
  const BlockRows* rows = nullptr;
  std::int64_t first = 0, count = 0, bytes = 0;
  bool v_rows = true;  // false: only the rows->k spans (a stream over one kind of row)

  // Issues the next `k` rows' prefetches.
  inline void step(std::int64_t k) {
    const std::int64_t end = std::min(count, k);
    for (std::int64_t i = 0; i < end; ++i) {
      const std::byte* kr = rows->k[first + i];
      // K-only: the K span is issued twice (the second finds the line in flight) instead of
      // guarding the second prefetch: the guarded loop measured ~5% slower in the decode.
      const std::byte* vr = v_rows ? rows->v[first + i] : kr;
      for (std::int64_t off = 0; off < bytes; off += kDecodeCacheLine) {
        __builtin_prefetch(kr + off);
        __builtin_prefetch(vr + off);
      }
    }
    first += end;
    count -= end;
  }
};

// Issues L1 prefetches of `bytes` bytes from p.
inline void prefetch_span(const std::byte* p, std::int64_t bytes) {
  for (std::int64_t off = 0; off < bytes; off += kDecodeCacheLine) __builtin_prefetch(p + off);
}

// The same, four lines per step (up to three lines past the span: harmless, prefetches do not
// fault): a quarter of the loop overhead for the long spans of the token-major order.
inline void prefetch_span4(const std::byte* p, std::int64_t bytes) {
  for (std::int64_t off = 0; off < bytes; off += 4 * kDecodeCacheLine) {
    __builtin_prefetch(p + off);
    __builtin_prefetch(p + off + kDecodeCacheLine);
    __builtin_prefetch(p + off + 2 * kDecodeCacheLine);
    __builtin_prefetch(p + off + 3 * kDecodeCacheLine);
  }
}

// Runs f.template operator()<kG>(g0) over a query-head group in tiles of 4, 2 and 1 heads, so
// kernels instantiate only those tile widths whatever the group size.
// kMaxTile 2 caps the tiles at 2 heads (kernels whose 4-head tile needs more registers than
// the target has).
template <int kMaxTile = 4, class F>
inline void for_group_tiles(std::int64_t group, const F& f) {
  static_assert(kMaxTile == 2 || kMaxTile == 4);
  std::int64_t g0 = 0;
  if constexpr (kMaxTile == 4) {
    for (; g0 + 4 <= group; g0 += 4) f.template operator()<4>(g0);
  }
  for (; g0 + 2 <= group; g0 += 2) f.template operator()<2>(g0);
  if (g0 < group) f.template operator()<1>(g0);
}

}  // namespace pagedattn::cpu
