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
// On cores where VDPBF16PS issues at under 1/2.5 of the FMA rate (decode_bf16_on_fmas), the
// token-major units take the *_fma entry points instead: the same loops on f32 FMAs over bf16
// chunks split into their even and odd dims (q and the accumulators in that order, the
// decode units' pair order), f32 weights.
#pragma once

#include <cstdint>

#include "pagedattn/dtype.h"

#include "cpu/cpu_features.h"
#include "cpu/decode_rows.h"

namespace pagedattn::cpu {

// What the FMA units' products of e4m3 rows are short of (their codes widened as IEEE halves:
// bias 15 against e4m3's 7).
inline constexpr float kE4m3RowScale = 256.0f;

// Head dims padded for the bf16 kernels: whole 32-element chunks.
inline std::int64_t bf16_padded_dim(std::int64_t head_dim) { return (head_dim + 31) / 32 * 32; }

// s[g * kDecodeBlock + j] = scale * q[g] . k[j] for g < group, j < rows.n. q: [group][q_stride]
// bf16 (64-byte aligned rows, zero past head_dim). The prefetch streams (if any) are issued
// along the way.
void bf16_decode_logits(const std::uint16_t* q, std::int64_t q_stride, std::int64_t group,
                        std::int64_t head_dim, float scale, const BlockRows& rows,
                        PrefetchStream* near, PrefetchStream* far, float* s);

// Token-major logits of all `heads` KV heads of a run of tokens (NHD: a token's heads are
// `k_head_bytes` apart in one row): s[j * s_row + h * group + g] = scale * q[h][g] . k_h[j]
// for h < heads, g < group, j < rows.n, where rows.k[j] points at head 0 of token j and q is
// [heads][group][q_stride] bf16. Each quad of tokens is read across all heads before the next
// (whole token rows in address order). jit_bytes > 0: the next quad's rows (jit_bytes from each
// row pointer) are pulled into L1 a quad ahead. next_k (if any, >= rows.n entries): row
// pointers of the next unit, whose same (quad, head) rows are prefetched (prefetcht2) along.
void bf16_decode_logits_heads(const std::uint16_t* q, std::int64_t q_stride, std::int64_t heads,
                              std::int64_t group, std::int64_t head_dim, float scale,
                              const BlockRows& rows, std::int64_t k_head_bytes,
                              const std::byte* const* next_k, float* s,
                              std::int64_t s_row, std::int64_t jit_bytes);

// bf16_decode_logits_heads on f32 FMAs (VDPBF16PS issues at under half the FMA rate on some
// cores: docs/perf-notes.md): q is f32 [heads][group][q_stride], already scaled, each 32-dim
// chunk in pair order (its 16 even dims, then its 16 odd ones); head_dim a multiple of 32.
void bf16_decode_logits_heads_fma(const float* q, std::int64_t q_stride, std::int64_t heads,
                                  std::int64_t group, std::int64_t head_dim, const BlockRows& rows,
                                  std::int64_t k_head_bytes, const std::byte* const* next_k,
                                  float* s, std::int64_t s_row, std::int64_t jit_bytes,
                                  DType rows_dtype = DType::kBF16);

// acc[g] += sum_j w[j * w_j + g * w_g] * v[j] for g < group, j < rows.n on f32 FMAs, acc
// [group][head_dim] in the pair order above (head_dim a multiple of 32), f32 weights. pf_v (if
// any): the next unit's V rows of this head, prefetched along as by the pairs kernel.
// Both *_fma entry points also take rows of IEEE halves or fp8 codes (rows_dtype): the same loops,
// each chunk converted into the same pair order (fp8 without its scales, and e4m3 as its values
// divided by kE4m3RowScale, which the caller puts back into q and the accumulators).
void bf16_decode_accumulate_fma(float* acc, std::int64_t group, std::int64_t head_dim,
                                const BlockRows& rows, const float* w, std::int64_t w_g,
                                std::int64_t w_j, const std::byte* const* pf_v,
                                DType rows_dtype = DType::kBF16);

// w[(j / 2) * width + i] = bf16(e[j * row + i]) | bf16(e[(j + 1) * row + i]) << 16 for even
// j < n and i < width (a multiple of 16); the partner of an odd n's last token is zero.
void bf16_pack_pairs(const float* e, std::int64_t row, std::int64_t n, std::int64_t width,
                     std::uint32_t* w);

// As bf16_decode_accumulate, with the weights already paired: head g's weight pair of keys
// (j, j + 1) is w[g * w_g + (j / 2) * w_j].
void bf16_decode_accumulate_pairs(float* acc, std::int64_t group, std::int64_t head_dim,
                                  const BlockRows& rows, const std::uint32_t* w, std::int64_t w_g,
                                  std::int64_t w_j, PrefetchStream* pf,
                                  const std::byte* const* pf_v);

// acc[g] += sum_j p[g * p_stride + j] * v[j] for g < group, j < rows.n, with acc
// [group][bf16_padded_dim] in pair order and p the f32 weights (zero or finite past rows.n is
// not needed: only [0, rows.n) is read). `pairs` is scratch of group * p_stride u16
// (p_stride: a multiple of 16).
void bf16_decode_accumulate(float* acc, std::int64_t group, std::int64_t head_dim,
                            const BlockRows& rows, const float* p, std::int64_t p_stride,
                            std::uint16_t* pairs, PrefetchStream* pf);

// dst[0, head_dim) = the dim-ordered values of one pair-ordered accumulator row.
void bf16_unpermute_acc(const float* src, std::int64_t head_dim, float* dst);

}  // namespace pagedattn::cpu
