// AMX (Advanced Matrix Extensions) tiles for the CPU prefill's logits (declared in prefill_tile.h).
//
// S^T = K Q^T as tile products: A = 16 key rows x 32 dims (bf16, a block's keys copied into one
// contiguous array), B = 32 dims x 16 query rows of the tile's Q^T pairs (already AMX's
// "VNNI" layout: dims 2i and 2i + 1 of a row side by side), C = 16 keys x 16 rows of f32 logits.
// One TDPBF16PS does 8192 multiply-adds (16 x 16 x 32): a core's AVX512-BF16 needs 256
// instructions for as many.
#include <sys/syscall.h>
#include <unistd.h>

#include <cpuid.h>
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "cpu/prefill_tile.h"

#define PAGEDATTN_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

namespace pagedattn::cpu {

namespace {

// Linux hands a process the AMX tile state only once it asks (arch_prctl, kernel 5.16+).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  const bool amx_bf16 = (d >> 22) & 1u, amx_tile = (d >> 24) & 1u;
  return amx_bf16 && amx_tile;
}

// LDTILECFG's 64-byte operand: palette 1; tiles 0-3 hold C (16 rows x 16 f32), 4 holds A (16
// key rows x 32 bf16), 5 holds B (16 dim pairs x 16 query rows).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

TileConfig make_config() {
  TileConfig cfg;
  for (int t = 0; t < 6; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  return cfg;
}

// C tiles 0 .. kRowTiles - 1 take rows [16 t, 16 t + 16) of the tile's queries.
template <int kRowTiles>
PAGEDATTN_AMX_TARGET void scores_key_tile(const std::uint16_t* key_tile, std::int64_t head_dim,
                                          const std::uint32_t* q_pairs, std::int64_t rows_stride,
                                          float* s_t) {
  static_assert(kRowTiles >= 1 && kRowTiles <= 4);
  const auto key_bytes = static_cast<long>(head_dim * 2), pair_bytes = static_cast<long>(rows_stride * 4);
  _tile_zero(0);
  if constexpr (kRowTiles > 1) _tile_zero(1);
  if constexpr (kRowTiles > 2) _tile_zero(2);
  if constexpr (kRowTiles > 3) _tile_zero(3);
  for (std::int64_t d0 = 0; d0 < head_dim; d0 += 32) {
    _tile_loadd(4, key_tile + d0, key_bytes);
    const std::uint32_t* b = q_pairs + d0 / 2 * rows_stride;
    _tile_loadd(5, b, pair_bytes);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (kRowTiles > 1) {
      _tile_loadd(5, b + 16, pair_bytes);
      _tile_dpbf16ps(1, 4, 5);
    }
    if constexpr (kRowTiles > 2) {
      _tile_loadd(5, b + 32, pair_bytes);
      _tile_dpbf16ps(2, 4, 5);
    }
    if constexpr (kRowTiles > 3) {
      _tile_loadd(5, b + 48, pair_bytes);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  _tile_stored(0, s_t, pair_bytes);
  if constexpr (kRowTiles > 1) _tile_stored(1, s_t + 16, pair_bytes);
  if constexpr (kRowTiles > 2) _tile_stored(2, s_t + 32, pair_bytes);
  if constexpr (kRowTiles > 3) _tile_stored(3, s_t + 48, pair_bytes);
}

}  // namespace

bool amx_bf16_supported() {
  static const bool usable = [] {
    if (!cpu_has_amx_bf16()) return false;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

bool amx_prefill_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("PAGEDATTN_CPU_AMX");
    return !(env != nullptr && std::string_view(env) == "0") && amx_bf16_supported();
  }();
  return enabled;
}

PAGEDATTN_AMX_TARGET void amx_scores(const std::uint32_t* q_pairs, std::int64_t rows,
                                     std::int64_t rows_stride, std::int64_t head_dim,
                                     const std::uint16_t* const* keys, std::int64_t num_keys,
                                     std::uint16_t* key_block, float* s_t) {
  static const TileConfig config = make_config();
  _tile_loadconfig(&config);
  // Whole 16-key tiles: the rows past num_keys are zeros (their logits land in s_t rows that
  // the caller does not read; s_t has kBlockKeys rows).
  const std::int64_t padded = (num_keys + 15) / 16 * 16;
  const auto row_bytes = static_cast<std::size_t>(head_dim) * 2;
  for (std::int64_t n = 0; n < num_keys; ++n) std::memcpy(key_block + n * head_dim, keys[n], row_bytes);
  std::memset(key_block + num_keys * head_dim, 0, static_cast<std::size_t>(padded - num_keys) * row_bytes);
  for (std::int64_t k0 = 0; k0 < padded; k0 += 16) {
    const std::uint16_t* key_tile = key_block + k0 * head_dim;
    float* out = s_t + k0 * rows_stride;
    switch (rows / 16) {
      case 1: scores_key_tile<1>(key_tile, head_dim, q_pairs, rows_stride, out); break;
      case 2: scores_key_tile<2>(key_tile, head_dim, q_pairs, rows_stride, out); break;
      case 3: scores_key_tile<3>(key_tile, head_dim, q_pairs, rows_stride, out); break;
      default: scores_key_tile<4>(key_tile, head_dim, q_pairs, rows_stride, out); break;
    }
  }
  _tile_release();
}

}  // namespace pagedattn::cpu
