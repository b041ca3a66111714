// The bf16 decode over vLLM's split layout on AMX tiles (see decode_split_amx.h).
#include "cpu/decode_split_amx.h"

#include <immintrin.h>

#include "cpu/amx_tiles.h"
#include "cpu/decode_rows.h"

namespace pagedattn::cpu {

namespace {
// Tiles: 0 = C, the logits (16 keys x group f32) and the even 16-dim blocks of O^T; 5 = C, the
// odd blocks of O^T; 1, 2 = A, K's 16 tokens x 8 dims; 3, 4 = B, q's 4 dim pairs x group; 6 = A,
// V's 16 dims x 16 tokens; 7 = B, the weights' 8 token pairs x group.
constexpr int kTokens = 16;
constexpr long kKRowBytes = 16;  // 8 bf16 dims of one token

// The 256-byte blocks of K (one per 8 dims) of a later unit, two at a time.
inline void prefetch_k_blocks(const SplitUnit& ahead, std::int64_t i) {
  if (ahead.k == nullptr) return;
  for (std::int64_t b = i; b < i + 2; ++b) {
    const std::byte* p = ahead.k + b * ahead.k_block_bytes;
    for (int off = 0; off < kTokens * kKRowBytes; off += kDecodeCacheLine) __builtin_prefetch(p + off, 0, 1);
  }
}

// The 32-byte V rows of dims [d0, d1) of a later unit, one prefetch per line.
inline void prefetch_v_rows(const SplitUnit& ahead, std::int64_t d0, std::int64_t d1) {
  if (ahead.v == nullptr) return;
  const std::int64_t step = ahead.v_dim_bytes < kDecodeCacheLine ? kDecodeCacheLine / ahead.v_dim_bytes : 1;
  for (std::int64_t d = d0; d < d1; d += step) __builtin_prefetch(ahead.v + d * ahead.v_dim_bytes, 0, 1);
}
}  // namespace

PAGEDATTN_AMX_TARGET void amx_split_tiles_begin(std::int64_t group) {
  TileConfig cfg;
  const auto group_bytes = static_cast<std::uint16_t>(group * 4);
  cfg.colsb[0] = cfg.colsb[5] = group_bytes;
  cfg.rows[0] = cfg.rows[5] = kTokens;
  cfg.colsb[1] = cfg.colsb[2] = kKRowBytes;
  cfg.rows[1] = cfg.rows[2] = kTokens;
  cfg.colsb[3] = cfg.colsb[4] = group_bytes;
  cfg.rows[3] = cfg.rows[4] = kKRowBytes / 4;  // dim pairs of a K row
  cfg.colsb[6] = kTokens * 2;
  cfg.rows[6] = 16;  // dims
  cfg.colsb[7] = group_bytes;
  cfg.rows[7] = kTokens / 2;  // token pairs
  // As in amx_decode_tiles_begin: GCC 12's LDTILECFG builtin would otherwise drop the stores.
  asm volatile("" : : "m"(cfg) : "memory");
  _tile_loadconfig(&cfg);
}

PAGEDATTN_AMX_TARGET void amx_split_logits_unit(const std::uint32_t* q_pairs, std::int64_t group,
                                                std::int64_t head_dim, const SplitUnit& unit,
                                                const SplitUnit& ahead, float* s, std::int64_t s_row) {
  const long q_row_bytes = static_cast<long>(group * 4);
  const std::int64_t blocks = head_dim / 8;  // even: head_dim is a multiple of 16
  _tile_zero(0);
  for (std::int64_t i = 0; i < blocks; i += 2) {
    prefetch_k_blocks(ahead, i);
    _tile_loadd(1, unit.k + i * unit.k_block_bytes, kKRowBytes);
    _tile_loadd(3, q_pairs + i * 4 * group, q_row_bytes);
    _tile_loadd(2, unit.k + (i + 1) * unit.k_block_bytes, kKRowBytes);
    _tile_loadd(4, q_pairs + (i + 1) * 4 * group, q_row_bytes);
    _tile_dpbf16ps(0, 1, 3);
    _tile_dpbf16ps(0, 2, 4);
  }
  _tile_stored(0, s, static_cast<long>(s_row * 4));
}

PAGEDATTN_AMX_TARGET void amx_split_accumulate_unit(float* acc_t, std::int64_t acc_stride, std::int64_t group,
                                                    std::int64_t head_dim, const SplitUnit& unit,
                                                    const std::uint32_t* w_pairs, const SplitUnit& ahead) {
  const long w_row_bytes = static_cast<long>(group * 4), acc_row_bytes = static_cast<long>(acc_stride * 4);
  const long v_stride = static_cast<long>(unit.v_dim_bytes);
  const std::int64_t blocks = head_dim / 16;
  _tile_loadd(7, w_pairs, w_row_bytes);
  std::int64_t b = 0;
  // Two blocks a step on two C tiles, so that one block's load need not wait for the other's
  // product to be stored.
  for (; b + 2 <= blocks; b += 2) {
    prefetch_v_rows(ahead, b * 16, b * 16 + 32);
    float* c0 = acc_t + b * 16 * acc_stride;
    float* c1 = c0 + 16 * acc_stride;
    _tile_loadd(0, c0, acc_row_bytes);
    _tile_loadd(6, unit.v + b * 16 * unit.v_dim_bytes, v_stride);
    _tile_dpbf16ps(0, 6, 7);
    _tile_loadd(5, c1, acc_row_bytes);
    _tile_stored(0, c0, acc_row_bytes);
    _tile_loadd(6, unit.v + (b + 1) * 16 * unit.v_dim_bytes, v_stride);
    _tile_dpbf16ps(5, 6, 7);
    _tile_stored(5, c1, acc_row_bytes);
  }
  if (b < blocks) {
    prefetch_v_rows(ahead, b * 16, b * 16 + 16);
    float* c0 = acc_t + b * 16 * acc_stride;
    _tile_loadd(0, c0, acc_row_bytes);
    _tile_loadd(6, unit.v + b * 16 * unit.v_dim_bytes, v_stride);
    _tile_dpbf16ps(0, 6, 7);
    _tile_stored(0, c0, acc_row_bytes);
  }
}

}  // namespace pagedattn::cpu
