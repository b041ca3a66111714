// Internal: the pieces of the CPU prefill kernel shared by its planner (prefill.cpp), its
// Highway tile driver (prefill_tile.cpp) and its AVX512-BF16 micro-kernels (prefill_bf16.cpp).
//
// A tile is one sequence, one KV head, a few of that head's query heads and a block of
// consecutive queries. Its rows (query x head, query-major) sit in SIMD lanes: S^T = K Q^T is
// [keys][rows] and O^T is [head_dim][rows], so the softmax over keys is lane-wise (no
// horizontal reductions), K is read as natural rows and one loaded K/V block serves every row.
#pragma once

#include <cstddef>
#include <cstdint>

#include <hwy/aligned_allocator.h>

#include "core/problem.h"
#include "cpu/cpu_features.h"

namespace pagedattn::cpu {

inline constexpr std::int64_t kTileRows = 256;    // query rows (query x head) per tile, at most
inline constexpr std::int64_t kMinTileRows = 64;  // the fewest the planner picks (small batches)
inline constexpr std::int64_t kRowAlign = 16;     // rows are padded to a multiple of this (lanes)
// Keys per KV block of the AMX products (at most two 32-key sub-blocks; measured against 64:
// 32 ~12% slower, 128 in four sub-blocks ~5% slower), and of the others.
inline constexpr std::int64_t kBlockKeys = 64;
inline constexpr std::int64_t kSmallBlockKeys = 32;
// Key rows are padded to a multiple of 8 (the widest key blocking of the products).
static_assert(kBlockKeys % 8 == 0 && kSmallBlockKeys % 8 == 0);

struct PrefillTile {
  std::int64_t seq = 0, kv_head = 0;
  std::int64_t head_begin = 0, num_heads = 0;     // query heads kv_head * group + [begin, +num)
  std::int64_t query_begin = 0, num_queries = 0;  // the sequence's queries [begin, +num)
};

// One thread's working memory, reused across tiles. Sizes are for the problem's head_dim; the
// row stride of every [.][rows] array is kRowsPad floats (64-byte aligned rows).
struct TileScratch {
  static constexpr std::int64_t kRowsPad = (kTileRows + kRowAlign - 1) / kRowAlign * kRowAlign;

  explicit TileScratch(std::int64_t head_dim);

  std::int64_t head_dim;
  hwy::AlignedFreeUniquePtr<float[]> buffer;
  float* q_t;        // [head_dim][kRowsPad] f32 Q^T, or [head_dim / 2][kRowsPad] bf16 pairs
  float* o_t;        // [head_dim][kRowsPad] f32 unnormalised O^T
  float* s_t;        // [kBlockKeys][kRowsPad] f32 logits, then softmax weights, of one block
  float* p_pairs;    // [kBlockKeys / 2][kRowsPad] bf16 weight pairs (keys 2n, 2n+1)
  float* k_rows;     // [kBlockKeys][head_dim] converted K rows (f32, or bf16 in the low half)
  float* v_rows;     // [kBlockKeys][head_dim] converted V rows
  float* v_pairs;    // [kBlockKeys / 2][head_dim] bf16 value pairs (keys 2n, 2n+1)
  float* zero_row;   // [head_dim] zeros: the row behind padded keys
  std::uint16_t* key_block;  // [kBlockKeys][head_dim] bf16: a block's key rows side by side (AMX)
  std::uint32_t* v_t;        // [kBlockKeys / 32][head_dim][16] bf16 value pairs transposed, per
                             // 32-key sub-block (AMX)
  float* row_max;    // [kRowsPad] running max of the logits
  float* row_sum;    // [kRowsPad] running sum of exp(logit - max)
  float* row_alpha;  // [kRowsPad] rescale of O^T for the current block
  float* row_pos;    // [kRowsPad] query position (f32, for ALiBi)
  float* row_slope;  // [kRowsPad] ALiBi slope (0 without ALiBi)
  std::int32_t* row_pos_i;    // [kRowsPad] query position
  std::int32_t* row_min_key;  // [kRowsPad] first key position the window admits
  const void* key_ptrs[kBlockKeys];
  const void* value_ptrs[kBlockKeys];
};

// How a tile's products run: f32 Highway FMAs; AVX512-BF16 dot products (q and KV bf16, the
// caller checked bf16_dot_supported()); or AMX tiles (head_dim a multiple of 32, the caller
// checked amx_tiles_enabled() too).
enum class TileProducts { kF32, kBf16Dot, kAmx };

// Runs one tile: reads its queries and KV, writes its rows of out (and lse).
void run_prefill_tile(const detail::AttentionProblem& p, const PrefillTile& tile, TileProducts products,
                      TileScratch& scratch);

// ---- AVX512-BF16 micro-kernels (prefill_bf16.cpp); call only when bf16_dot_supported() ----

// s_t[n][r] = sum_d k_n[d] q_r[d] for n < num_keys (a multiple of 8), r < rows (a multiple of
// 16). q_pairs: [head_dim / 2][rows_stride] u32 (q_r[2i] | q_r[2i+1] << 16); keys: bf16 rows.
void bf16_scores(const std::uint32_t* q_pairs, std::int64_t rows, std::int64_t rows_stride,
                 std::int64_t head_dim, const std::uint16_t* const* keys, std::int64_t num_keys,
                 float* s_t);

// o_t[d][r] = o_t[d][r] * alpha[r] + sum_n p_n[r] v_n[d], over key pairs n < num_pairs.
// p_pairs: [num_pairs][rows_stride] u32; v_pairs: [num_pairs][head_dim] u32.
void bf16_accumulate(const std::uint32_t* p_pairs, const std::uint32_t* v_pairs,
                     std::int64_t num_pairs, std::int64_t rows, std::int64_t rows_stride,
                     std::int64_t head_dim, const float* alpha, float* o_t);

// v_pairs[n][d] = v_{2n}[d] | v_{2n+1}[d] << 16 for n < ceil(num_keys / 2); a missing odd key
// contributes 0.
void bf16_pack_value_pairs(const std::uint16_t* const* values, std::int64_t num_keys,
                           std::int64_t head_dim, std::uint32_t* v_pairs);

// dst[i] = the bf16 of fp8 code src[i] (dtype e4m3 or e5m2), i < n: exact, every fp8 value is a
// bf16 one (fp8 unscaled).
void fp8_to_bf16(const std::uint8_t* src, DType dtype, std::int64_t n, std::uint16_t* dst);

// ---- AMX tiles (prefill_amx.cpp); call only when amx_tiles_enabled() ----

// The tile configuration amx_scores and amx_accumulate run under: load it on a thread before
// them, release it after (amx_tiles_end, cpu_features.h; a tile's blocks share one).
void amx_tiles_begin();

// bf16_scores on AMX tiles, for head_dim a multiple of 32 and rows a multiple of 16 up to
// kTileRows; key_block: [kBlockKeys][head_dim] scratch for the key rows.
void amx_scores(const std::uint32_t* q_pairs, std::int64_t rows, std::int64_t rows_stride,
                std::int64_t head_dim, const std::uint16_t* const* keys, std::int64_t num_keys,
                std::uint16_t* key_block, float* s_t);

// bf16_accumulate on AMX tiles, for head_dim a multiple of 16 and rows a multiple of 16 up to
// kTileRows; p_pairs has kBlockKeys / 2 rows (those from num_pairs on are zeroed), v_t:
// [head_dim][kBlockKeys / 2] scratch for V^T.
void amx_accumulate(std::uint32_t* p_pairs, const std::uint32_t* v_pairs, std::int64_t num_pairs,
                    std::int64_t rows, std::int64_t rows_stride, std::int64_t head_dim, const float* alpha,
                    float* o_t, std::uint32_t* v_t);

}  // namespace pagedattn::cpu
