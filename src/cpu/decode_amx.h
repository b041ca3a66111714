// Internal: the bf16 decode's logits on AMX tiles (decode_amx.cpp). Call only after
// amx_tiles_enabled() said yes.
//
// A unit's logits per KV head are one tile product, S[16 keys x group] = K_h Q_h^T, 32 dims per
// TDPBF16PS: A = 16 token rows x 32 dims read straight from the cache (the unit's rows evenly
// spaced), B = the group's q as dim pairs ("VNNI": dims 2r and 2r + 1 side by side), C = the 16
// keys' logits of the group's query heads, stored into the unit's token-major logits. No
// horizontal sums, which took ~20% of the f32 logits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagedattn::cpu {

// Loads the tile configuration of amx_decode_logits_unit for groups of `group` (<= 16) query
// heads on this thread; amx_tiles_end() (cpu_features.h) releases it.
void amx_decode_tiles_begin(std::int64_t group);

// s[j * s_row + h * group + g] = q[h][g] . k_h[j] (unscaled) for the 16 token rows j of a unit
// and h < heads, g < group: k_h[j] = k0 + j * row_stride + h * k_head_bytes (bf16, head_dim a
// multiple of 32), q_pairs [heads][head_dim / 2][group] u32 (row r: dims 2r, 2r + 1 of each
// query head). next_k (if any, 16 entries): the next unit's rows, whose head h is prefetched
// (prefetcht2) along with head h's product; head h + 1 of this unit is pulled into L1 meanwhile.
void amx_decode_logits_unit(const std::uint32_t* q_pairs, std::int64_t heads, std::int64_t group,
                            std::int64_t head_dim, const std::byte* k0, std::int64_t row_stride,
                            std::int64_t k_head_bytes, const std::byte* const* next_k, float* s,
                            std::int64_t s_row);

}  // namespace pagedattn::cpu
