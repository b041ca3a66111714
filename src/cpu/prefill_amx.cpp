// AMX (Advanced Matrix Extensions) tiles for the CPU prefill's products (declared in
// prefill_tile.h), and the gate every AMX use checks (cpu_features.h). One TDPBF16PS does 8192
// multiply-adds (16 x 16 x 32): a core's AVX512-BF16 needs 256 instructions for as many.
// - Logits S^T = K Q^T: A = 16 key rows x 32 dims (bf16, a block's keys copied into one
//   contiguous array), B = 32 dims x 16 query rows of the tile's Q^T pairs (already AMX's
//   "VNNI" layout: dims 2i and 2i + 1 of a row side by side), C = 16 keys x 16 rows of f32.
// - Outputs O^T += V^T P^T: A = 16 dims x 32 keys of V^T (the value pairs transposed), B = the
//   weight pairs as they are (keys 2n and 2n + 1 of a row side by side), C = 16 dims x 16 rows.
#include <sys/syscall.h>
#include <unistd.h>

#include <cpuid.h>
// GCC 12 reports the _mm512_undefined_* placeholders inside the unpack intrinsics as
// uninitialized once they are inlined; the values are fully overwritten (as in bf16_dot.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/env_switch.h"
#include "cpu/amx_tiles.h"
#include "cpu/cpu_features.h"
#include "cpu/prefill_tile.h"

namespace pagedattn::cpu {

namespace {

// One product's depth: 32 bf16 keys, 16 pairs (so a V^T row is 64 bytes). A key block holds one
// or two of these sub-blocks.
constexpr std::int64_t kPairs = 16;
static_assert(kBlockKeys % 32 == 0 && kBlockKeys / 32 <= 2, "B tiles 4 and 5 hold a row tile's sub-blocks");

// Linux hands a process the AMX tile state only once it asks (arch_prctl, kernel 5.16+).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  const bool amx_bf16 = (d >> 22) & 1u, amx_tile = (d >> 24) & 1u;
  return amx_bf16 && amx_tile;
}

// All eight tiles 16 rows of 64 bytes (16 f32, 32 bf16 or 16 bf16 pairs).
TileConfig make_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
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

// dst[j * dst_stride + i] = src[i * src_stride + j] for i, j < 16 (32-bit elements); source
// rows i >= valid_rows read as zeros.
PAGEDATTN_AMX_TARGET void transpose16(const std::uint32_t* src, std::int64_t src_stride, std::int64_t valid_rows,
                                      std::uint32_t* dst, std::int64_t dst_stride) {
  __m512i a[16], b[16], c[16];
  for (int i = 0; i < 16; ++i) a[i] = i < valid_rows ? _mm512_loadu_si512(src + i * src_stride) : _mm512_setzero_si512();
  // Pairs of rows, then pairs of pairs, interleaved within 128-bit lanes: c[4 k + m] holds, in
  // lane L, rows 4 k .. 4 k + 3 of column 4 L + m.
  for (int k = 0; k < 8; ++k) {
    b[2 * k] = _mm512_unpacklo_epi32(a[2 * k], a[2 * k + 1]);
    b[2 * k + 1] = _mm512_unpackhi_epi32(a[2 * k], a[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {
    c[4 * k + 0] = _mm512_unpacklo_epi64(b[4 * k], b[4 * k + 2]);
    c[4 * k + 1] = _mm512_unpackhi_epi64(b[4 * k], b[4 * k + 2]);
    c[4 * k + 2] = _mm512_unpacklo_epi64(b[4 * k + 1], b[4 * k + 3]);
    c[4 * k + 3] = _mm512_unpackhi_epi64(b[4 * k + 1], b[4 * k + 3]);
  }
  // Column 4 L + m gathers lane L of c[m], c[4 + m], c[8 + m], c[12 + m].
  for (int m = 0; m < 4; ++m) {
    const __m512i p = c[m], q = c[4 + m], r = c[8 + m], t = c[12 + m];
    const __m512i lo_pq = _mm512_shuffle_i32x4(p, q, 0x44), lo_rt = _mm512_shuffle_i32x4(r, t, 0x44);
    const __m512i hi_pq = _mm512_shuffle_i32x4(p, q, 0xEE), hi_rt = _mm512_shuffle_i32x4(r, t, 0xEE);
    _mm512_storeu_si512(dst + m * dst_stride, _mm512_shuffle_i32x4(lo_pq, lo_rt, 0x88));
    _mm512_storeu_si512(dst + (4 + m) * dst_stride, _mm512_shuffle_i32x4(lo_pq, lo_rt, 0xDD));
    _mm512_storeu_si512(dst + (8 + m) * dst_stride, _mm512_shuffle_i32x4(hi_pq, hi_rt, 0x88));
    _mm512_storeu_si512(dst + (12 + m) * dst_stride, _mm512_shuffle_i32x4(hi_pq, hi_rt, 0xDD));
  }
}

// O^T += V^T P^T for the tile's rows, over `subs` (1 or 2) sub-blocks of 32 keys: per row tile of
// 16 rows, B tiles 4 and 5 hold its weight pairs of each sub-block; per 16 dims a C tile of O^T
// is loaded once, takes one product per sub-block (A = that sub-block's V^T) and is stored. Two
// chains by turns, C tile 0 with A tiles 2 and 3 and C tile 1 with A tiles 6 and 7, so that no
// A load waits for the other chain's product. (One C load and store per product, as with 32-key
// blocks, cost about three products' time: a store waits for its product's result.)
PAGEDATTN_AMX_TARGET void accumulate_tiles(const std::uint32_t* p_pairs, std::int64_t rows, std::int64_t rows_stride,
                                           const std::uint32_t* v_t, std::int64_t head_dim, float* o_t,
                                           std::int64_t subs) {
  const auto pair_bytes = static_cast<long>(rows_stride * 4);
  const std::int64_t sub_vt = head_dim * kPairs;  // V^T elements of a sub-block
// C tile c of dims d, A tiles a0 and a1: load, the sub-blocks' products, store.
#define PAGEDATTN_DIMS_PRODUCTS(c, a0, a1, d)           \
  do {                                                  \
    float* o = o_rt + (d) * rows_stride;                \
    const std::uint32_t* a = v_t + (d) * kPairs;        \
    _tile_loadd(c, o, pair_bytes);                      \
    _tile_loadd(a0, a, kPairs * 4);                     \
    _tile_dpbf16ps(c, a0, 4);                           \
    if (subs > 1) {                                     \
      _tile_loadd(a1, a + sub_vt, kPairs * 4);          \
      _tile_dpbf16ps(c, a1, 5);                         \
    }                                                   \
    _tile_stored(c, o, pair_bytes);                     \
  } while (false)
  for (std::int64_t r0 = 0; r0 < rows; r0 += 16) {
    const std::uint32_t* p = p_pairs + r0;
    _tile_loadd(4, p, pair_bytes);
    if (subs > 1) _tile_loadd(5, p + kPairs * rows_stride, pair_bytes);
    float* o_rt = o_t + r0;
    std::int64_t d0 = 0;
    for (; d0 + 32 <= head_dim; d0 += 32) {
      PAGEDATTN_DIMS_PRODUCTS(0, 2, 3, d0);
      PAGEDATTN_DIMS_PRODUCTS(1, 6, 7, d0 + 16);
    }
    if (d0 < head_dim) PAGEDATTN_DIMS_PRODUCTS(0, 2, 3, d0);
  }
#undef PAGEDATTN_DIMS_PRODUCTS
}

// Rows per pass of the tile functions: four C tiles of 16.
constexpr std::int64_t kRowsPerPass = 64;

// f(std::integral_constant<int, n>{}) for n = rows / 16, 1 to 4: the tile functions take their
// count of 16-row tiles as a constant (tile numbers are instruction immediates).
template <class F>
void with_row_tiles(std::int64_t rows, const F& f) {
  switch (rows / 16) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

}  // namespace

bool amx_bf16_supported() {
  static const bool usable = [] {
    if (!cpu_has_amx_bf16()) return false;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

bool amx_tiles_enabled() {
  static const bool enabled = [] {
    return !detail::env_switched_off("PAGEDATTN_CPU_AMX") && amx_bf16_supported();
  }();
  return enabled;
}

PAGEDATTN_AMX_TARGET void amx_tiles_begin() {
  static const TileConfig config = make_config();
  _tile_loadconfig(&config);
}

PAGEDATTN_AMX_TARGET void amx_tiles_end() { _tile_release(); }

PAGEDATTN_AMX_TARGET void amx_scores(const std::uint32_t* q_pairs, std::int64_t rows,
                                     std::int64_t rows_stride, std::int64_t head_dim,
                                     const std::uint16_t* const* keys, std::int64_t num_keys,
                                     std::uint16_t* key_block, float* s_t) {
  // Whole 16-key tiles: the rows past num_keys are zeros (their logits land in s_t rows that
  // the caller does not read; s_t has kBlockKeys rows).
  const std::int64_t padded = (num_keys + 15) / 16 * 16;
  const auto row_bytes = static_cast<std::size_t>(head_dim) * 2;
  for (std::int64_t n = 0; n < num_keys; ++n) std::memcpy(key_block + n * head_dim, keys[n], row_bytes);
  std::memset(key_block + num_keys * head_dim, 0, static_cast<std::size_t>(padded - num_keys) * row_bytes);
  for (std::int64_t k0 = 0; k0 < padded; k0 += 16) {
    const std::uint16_t* key_tile = key_block + k0 * head_dim;
    float* out = s_t + k0 * rows_stride;
    for (std::int64_t r0 = 0; r0 < rows; r0 += kRowsPerPass) {
      with_row_tiles(std::min(kRowsPerPass, rows - r0), [&](auto n) {
        scores_key_tile<n()>(key_tile, head_dim, q_pairs + r0, rows_stride, out + r0);
      });
    }
  }
}

PAGEDATTN_AMX_TARGET void amx_accumulate(std::uint32_t* p_pairs, const std::uint32_t* v_pairs,
                                         std::int64_t num_pairs, std::int64_t rows, std::int64_t rows_stride,
                                         std::int64_t head_dim, const float* alpha, float* o_t,
                                         std::uint32_t* v_t) {
  // Whole sub-blocks of 32 keys: the pairs past num_pairs weigh nothing (and their V^T columns
  // are zero).
  const std::int64_t subs = (num_pairs + kPairs - 1) / kPairs;
  for (std::int64_t n = num_pairs; n < subs * kPairs; ++n) {
    std::memset(p_pairs + n * rows_stride, 0, static_cast<std::size_t>(rows_stride) * 4);
  }
  // The rows' rescale, skipped while every factor is 1 (the running maxima hold).
  __mmask16 rescale = 0;
  for (std::int64_t r = 0; r < rows; r += 16) {
    rescale |= _mm512_cmp_ps_mask(_mm512_loadu_ps(alpha + r), _mm512_set1_ps(1.0f), _CMP_NEQ_UQ);
  }
  if (rescale != 0) {
    for (std::int64_t d = 0; d < head_dim; ++d) {
      float* o = o_t + d * rows_stride;
      for (std::int64_t r = 0; r < rows; r += 16) {
        _mm512_storeu_ps(o + r, _mm512_mul_ps(_mm512_loadu_ps(o + r), _mm512_loadu_ps(alpha + r)));
      }
    }
  }
  for (std::int64_t sb = 0; sb < subs; ++sb) {
    for (std::int64_t d0 = 0; d0 < head_dim; d0 += 16) {
      transpose16(v_pairs + sb * kPairs * head_dim + d0, head_dim, num_pairs - sb * kPairs,
                  v_t + (sb * head_dim + d0) * kPairs, kPairs);
    }
  }
  accumulate_tiles(p_pairs, rows, rows_stride, v_t, head_dim, o_t, subs);
}

}  // namespace pagedattn::cpu
