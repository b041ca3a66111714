// Internal: the bf16 decode over vLLM's split layout on AMX tiles (decode_split_amx.cpp). Call
// only after amx_tiles_enabled() said yes.
//
// The split layout keeps K as [dim / 8][token][8] and V as [dim][token] per (page, head), so
// neither has a token's dims in one row. Both products still read the cache in place:
// - logits, S[16 keys x group] = K Q^T: A = 16 tokens x 8 dims (one 16-byte row per token, the
//   tokens of a dim block being contiguous), B = the group's q as 4 dim pairs x group, one
//   TDPBF16PS per 8 dims;
// - p.v, O^T[16 dims x group] += V^T P^T: A = 16 dims x 16 tokens (V's own rows), B = the weights
//   as 8 token pairs x group (rounded to bf16), one TDPBF16PS per 16 dims, the accumulators
//   O^T [head_dim][group] f32 loaded and stored around it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagedattn::cpu {

// The geometry of a 16-token unit of one KV head, read in place: K's dim block i of token j at
// k + i * k_block_bytes + j * 16, V's dim d of token j at v + d * v_dim_bytes + j * 2.
struct SplitUnit {
  const std::byte* k = nullptr;
  const std::byte* v = nullptr;
  std::int64_t k_block_bytes = 0, v_dim_bytes = 0;
};

// Loads the tile configuration of the two functions below for groups of `group` (<= 16) query
// heads on this thread; amx_tiles_end() (cpu_features.h) releases it.
void amx_split_tiles_begin(std::int64_t group);

// s[j * s_row + g] = q[g] . k[j] (unscaled) for the unit's 16 tokens j and g < group; q_pairs
// [head_dim / 2][group] u32 (row r: dims 2r, 2r + 1 of each query head); head_dim a multiple of
// 16. `ahead` (if its k is set): a later unit whose K is prefetched (prefetcht2) along.
void amx_split_logits_unit(const std::uint32_t* q_pairs, std::int64_t group, std::int64_t head_dim,
                           const SplitUnit& unit, const SplitUnit& ahead, float* s, std::int64_t s_row);

// acc_t[d * acc_stride + g] += sum_j w[j][g] v[d][j] for the unit's 16 tokens and g < group,
// w_pairs [8][group] u32 (row r: the bf16 weights of tokens 2r, 2r + 1 of each query head).
// `ahead`: as above, V.
void amx_split_accumulate_unit(float* acc_t, std::int64_t acc_stride, std::int64_t group,
                               std::int64_t head_dim, const SplitUnit& unit,
                               const std::uint32_t* w_pairs, const SplitUnit& ahead);

}  // namespace pagedattn::cpu
