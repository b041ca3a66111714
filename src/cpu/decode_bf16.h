// Internal: the AVX512-BF16 micro-kernels of the CPU decode (decode_bf16.cpp).
//
// Used when q, KV and out are all bf16, rows are dim-contiguous and bf16_dot_supported():
//   - q.k: each query head's q stays bf16 (products of bf16 are exact in f32) and 32 products
//     per instruction go straight from the K rows, no conversion;
//   - p.v: the softmax weights are rounded to bf16 (<= 2^-9 relative per weight, inside the
//     bf16 output tolerance) and two keys' V rows are interleaved into bf16 pairs, so each
//     instruction adds p[j] v[j] + p[j+1] v[j+1] for 16 dims.
// The accumulators of p.v hold each 32-dim chunk in "pair order" (the order the interleave
// leaves them in); bf16_unpermute_acc() restores dim order once per work item.
#pragma once

#include <cstdint>

#include "cpu/decode_rows.h"

namespace pagedattn::cpu {

// True when the CPU runs AVX512F/BW/VL and AVX512-BF16 (defined in prefill_bf16.cpp).
bool bf16_dot_supported();

// Head dims padded for the bf16 kernels: whole 32-element chunks.
inline std::int64_t bf16_padded_dim(std::int64_t head_dim) { return (head_dim + 31) / 32 * 32; }

// s[g * kDecodeBlock + j] = scale * q[g] . k[j] for g < group, j < rows.n. q: [group][q_stride]
// bf16 (64-byte aligned rows, zero past head_dim). The prefetch streams (if any) are issued
// along the way.
void bf16_decode_logits(const std::uint16_t* q, std::int64_t q_stride, std::int64_t group,
                        std::int64_t head_dim, float scale, const BlockRows& rows,
                        PrefetchStream* near, PrefetchStream* far, float* s);

// acc[g] += sum_j p[g * kDecodeBlock + j] * v[j] for g < group, j < rows.n, with acc
// [group][bf16_padded_dim] in pair order and p the f32 weights (zero or finite past rows.n is
// not needed: only [0, rows.n) is read). `pairs` is scratch of group * kDecodeBlock u16.
void bf16_decode_accumulate(float* acc, std::int64_t group, std::int64_t head_dim,
                            const BlockRows& rows, const float* p, std::uint16_t* pairs,
                            PrefetchStream* pf);

// dst[0, head_dim) = the dim-ordered values of one pair-ordered accumulator row.
void bf16_unpermute_acc(const float* src, std::int64_t head_dim, float* dst);

}  // namespace pagedattn::cpu
