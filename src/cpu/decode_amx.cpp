// The bf16 decode's logits on AMX tiles (see decode_amx.h).
#include "cpu/decode_amx.h"

#include <immintrin.h>

#include "cpu/amx_tiles.h"
#include "cpu/decode_rows.h"

namespace pagedattn::cpu {

namespace {
// Tiles: 0 = C (16 keys x group f32), 1 and 2 = A (16 rows x 32 dims), 3 and 4 = B (16 dim
// pairs x group), alternating by chunk so that a load need not wait for the previous product.
constexpr int kKeys = 16;
}  // namespace

PAGEDATTN_AMX_TARGET void amx_decode_tiles_begin(std::int64_t group) {
  TileConfig cfg;
  const auto group_bytes = static_cast<std::uint16_t>(group * 4);
  cfg.colsb[0] = group_bytes;
  cfg.colsb[1] = cfg.colsb[2] = 64;
  cfg.colsb[3] = cfg.colsb[4] = group_bytes;
  for (int t = 0; t < 5; ++t) cfg.rows[t] = kKeys;
  // GCC 12's LDTILECFG builtin does not tell the optimiser that it reads the operand, which then
  // drops the stores above (the prefill's configuration is a static object, built before).
  asm volatile("" : : "m"(cfg) : "memory");
  _tile_loadconfig(&cfg);
}

PAGEDATTN_AMX_TARGET void amx_decode_logits_unit(const std::uint32_t* q_pairs, std::int64_t heads, std::int64_t group,
                                                 std::int64_t head_dim, const std::byte* k0, std::int64_t row_stride,
                                                 std::int64_t k_head_bytes, const std::byte* const* next_k, float* s,
                                                 std::int64_t s_row) {
  const long pair_row_bytes = static_cast<long>(group * 4), stride = static_cast<long>(row_stride);
  const std::int64_t chunks = head_dim / 32, head_pairs = head_dim / 2, row_bytes = head_dim * 2;
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::byte* kh = k0 + h * k_head_bytes;
    if (h + 1 < heads) {
      for (int j = 0; j < kKeys; ++j) prefetch_span4(kh + k_head_bytes + j * row_stride, row_bytes);
    }
    if (next_k != nullptr) {
      for (int j = 0; j < kKeys; ++j) {
        for (std::int64_t off = 0; off < row_bytes; off += kDecodeCacheLine) __builtin_prefetch(next_k[j] + h * k_head_bytes + off, 0, 1);
      }
    }
    const std::uint32_t* qh = q_pairs + h * head_pairs * group;
    _tile_zero(0);
    std::int64_t c = 0;
    for (; c + 2 <= chunks; c += 2) {
      _tile_loadd(1, kh + c * 64, stride);
      _tile_loadd(3, qh + c * 16 * group, pair_row_bytes);
      _tile_loadd(2, kh + (c + 1) * 64, stride);
      _tile_loadd(4, qh + (c + 1) * 16 * group, pair_row_bytes);
      _tile_dpbf16ps(0, 1, 3);
      _tile_dpbf16ps(0, 2, 4);
    }
    if (c < chunks) {
      _tile_loadd(1, kh + c * 64, stride);
      _tile_loadd(3, qh + c * 16 * group, pair_row_bytes);
      _tile_dpbf16ps(0, 1, 3);
    }
    _tile_stored(0, s + h * group, static_cast<long>(s_row * 4));
  }
}

}  // namespace pagedattn::cpu
