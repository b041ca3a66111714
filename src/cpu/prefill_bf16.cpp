// AVX512-BF16 micro-kernels of the CPU prefill (declared in prefill_tile.h).
//
// With a = 16 rows' pairs (rows in lanes) and b = one broadcast pair of a K row (or of two
// V rows), each VDPBF16PS does 32 multiply-adds, twice the f32 FMA rate (see bf16_dot.h).
// These functions run only after bf16_dot_supported() said yes.
#include "cpu/bf16_dot.h"

#include "cpu/prefill_tile.h"

namespace pagedattn::cpu {

namespace {

using bf16::broadcast_pair;
using bf16::dot_pairs;
using bf16::kLanes;

// s_t rows [r0, r0 + 16 kVecs) of keys [0, kKeys) of `keys`.
template <int kVecs, int kKeys>
PAGEDATTN_BF16_TARGET void scores_block(const std::uint32_t* q_pairs, std::int64_t rows_stride,
                                        std::int64_t half_dim, const std::uint16_t* const* keys,
                                        std::int64_t r0, float* s_t) {
  __m512 acc[kKeys][kVecs];
  for (int n = 0; n < kKeys; ++n) {
    for (int v = 0; v < kVecs; ++v) acc[n][v] = _mm512_setzero_ps();
  }
  const std::uint32_t* q = q_pairs + r0;
  for (std::int64_t i = 0; i < half_dim; ++i, q += rows_stride) {
    __m512i qv[kVecs];
    for (int v = 0; v < kVecs; ++v) qv[v] = _mm512_load_si512(q + v * kLanes);
    for (int n = 0; n < kKeys; ++n) {
      const __m512i kb = broadcast_pair(keys[n] + 2 * i);
      for (int v = 0; v < kVecs; ++v) acc[n][v] = dot_pairs(acc[n][v], qv[v], kb);
    }
  }
  for (int n = 0; n < kKeys; ++n) {
    for (int v = 0; v < kVecs; ++v) {
      _mm512_store_ps(s_t + n * rows_stride + r0 + v * kLanes, acc[n][v]);
    }
  }
}

template <int kVecs, int kKeys>
PAGEDATTN_BF16_TARGET void scores_rows(const std::uint32_t* q_pairs, std::int64_t rows_stride,
                                       std::int64_t half_dim, const std::uint16_t* const* keys,
                                       std::int64_t num_keys, std::int64_t r0, float* s_t) {
  for (std::int64_t n = 0; n < num_keys; n += kKeys) {
    scores_block<kVecs, kKeys>(q_pairs, rows_stride, half_dim, keys + n, r0,
                               s_t + n * rows_stride);
  }
}

// o_t rows [r0, r0 + 16 kVecs) of dims [d0, d0 + kDims).
template <int kVecs, int kDims>
PAGEDATTN_BF16_TARGET void accumulate_block(const std::uint32_t* p_pairs,
                                            const std::uint32_t* v_pairs, std::int64_t num_pairs,
                                            std::int64_t rows_stride, std::int64_t head_dim,
                                            const float* alpha, std::int64_t d0, std::int64_t r0,
                                            float* o_t) {
  __m512 acc[kDims][kVecs];
  for (int v = 0; v < kVecs; ++v) {
    const __m512 a = _mm512_load_ps(alpha + r0 + v * kLanes);
    for (int i = 0; i < kDims; ++i) {
      acc[i][v] = _mm512_mul_ps(_mm512_load_ps(o_t + (d0 + i) * rows_stride + r0 + v * kLanes), a);
    }
  }
  const std::uint32_t* p = p_pairs + r0;
  const std::uint32_t* vp = v_pairs + d0;
  for (std::int64_t n = 0; n < num_pairs; ++n, p += rows_stride, vp += head_dim) {
    __m512i pv[kVecs];
    for (int v = 0; v < kVecs; ++v) pv[v] = _mm512_load_si512(p + v * kLanes);
    for (int i = 0; i < kDims; ++i) {
      const __m512i vb = broadcast_pair(vp + i);
      for (int v = 0; v < kVecs; ++v) acc[i][v] = dot_pairs(acc[i][v], pv[v], vb);
    }
  }
  for (int i = 0; i < kDims; ++i) {
    for (int v = 0; v < kVecs; ++v) {
      _mm512_store_ps(o_t + (d0 + i) * rows_stride + r0 + v * kLanes, acc[i][v]);
    }
  }
}

template <int kVecs, int kDims>
PAGEDATTN_BF16_TARGET void accumulate_rows(const std::uint32_t* p_pairs,
                                           const std::uint32_t* v_pairs, std::int64_t num_pairs,
                                           std::int64_t rows_stride, std::int64_t head_dim,
                                           const float* alpha, std::int64_t r0, float* o_t) {
  for (std::int64_t d0 = 0; d0 < head_dim; d0 += kDims) {
    accumulate_block<kVecs, kDims>(p_pairs, v_pairs, num_pairs, rows_stride, head_dim, alpha, d0,
                                   r0, o_t);
  }
}

// 16 bf16 as the low halves of 16 u32 lanes; `valid` masks the loaded elements.
PAGEDATTN_BF16_TARGET inline __m512i widen(const std::uint16_t* p, __mmask16 valid) {
  return _mm512_maskz_cvtepu16_epi32(__mmask16(0xffff), _mm256_maskz_loadu_epi16(valid, p));
}

// Moves the low 16 bits of each lane to the high half (the odd element of a pair).
PAGEDATTN_BF16_TARGET inline __m512i shift_high(__m512i x) {
  return _mm512_maskz_slli_epi32(__mmask16(0xffff), x, 16);
}

}  // namespace

bool bf16_dot_supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

// Row blocks of 64 rows use 4 keys x 4 vectors (16 accumulators); narrower ones 8 keys.
PAGEDATTN_BF16_TARGET void bf16_scores(const std::uint32_t* q_pairs, std::int64_t rows,
                                       std::int64_t rows_stride, std::int64_t head_dim,
                                       const std::uint16_t* const* keys, std::int64_t num_keys,
                                       float* s_t) {
  const std::int64_t half_dim = head_dim / 2;
  std::int64_t r0 = 0;
  for (; r0 + 4 * kLanes <= rows; r0 += 4 * kLanes) {
    scores_rows<4, 4>(q_pairs, rows_stride, half_dim, keys, num_keys, r0, s_t);
  }
  switch ((rows - r0) / kLanes) {
    case 3: scores_rows<3, 4>(q_pairs, rows_stride, half_dim, keys, num_keys, r0, s_t); break;
    case 2: scores_rows<2, 8>(q_pairs, rows_stride, half_dim, keys, num_keys, r0, s_t); break;
    case 1: scores_rows<1, 8>(q_pairs, rows_stride, half_dim, keys, num_keys, r0, s_t); break;
    default: break;
  }
}

PAGEDATTN_BF16_TARGET void bf16_accumulate(const std::uint32_t* p_pairs,
                                           const std::uint32_t* v_pairs, std::int64_t num_pairs,
                                           std::int64_t rows, std::int64_t rows_stride,
                                           std::int64_t head_dim, const float* alpha, float* o_t) {
  std::int64_t r0 = 0;
  for (; r0 + 4 * kLanes <= rows; r0 += 4 * kLanes) {
    accumulate_rows<4, 4>(p_pairs, v_pairs, num_pairs, rows_stride, head_dim, alpha, r0, o_t);
  }
  switch ((rows - r0) / kLanes) {
    case 3:
      accumulate_rows<3, 4>(p_pairs, v_pairs, num_pairs, rows_stride, head_dim, alpha, r0, o_t);
      break;
    case 2:
      accumulate_rows<2, 8>(p_pairs, v_pairs, num_pairs, rows_stride, head_dim, alpha, r0, o_t);
      break;
    case 1:
      accumulate_rows<1, 8>(p_pairs, v_pairs, num_pairs, rows_stride, head_dim, alpha, r0, o_t);
      break;
    default: break;
  }
}

PAGEDATTN_BF16_TARGET void bf16_pack_value_pairs(const std::uint16_t* const* values,
                                                 std::int64_t num_keys, std::int64_t head_dim,
                                                 std::uint32_t* v_pairs) {
  for (std::int64_t n = 0; 2 * n < num_keys; ++n) {
    const std::uint16_t* even = values[2 * n];
    const std::uint16_t* odd = 2 * n + 1 < num_keys ? values[2 * n + 1] : nullptr;
    std::uint32_t* dst = v_pairs + n * head_dim;
    for (std::int64_t d = 0; d < head_dim; d += kLanes) {
      const std::int64_t left = head_dim - d;
      const __mmask16 valid = left >= kLanes ? __mmask16(0xffff)
                                             : static_cast<__mmask16>((1u << left) - 1u);
      __m512i pair = widen(even + d, valid);
      if (odd != nullptr) pair = _mm512_or_si512(pair, shift_high(widen(odd + d, valid)));
      _mm512_mask_storeu_epi32(dst + d, valid, pair);
    }
  }
}

namespace {
// 32 fp8 codes as 32 bf16: each code into the upper byte of a 16-bit lane, then as an IEEE half
// (bf16::e4m3_high_bytes_to_halves for e4m3: the value times 2^-8), half -> f32 (e4m3 times
// 256) -> bf16, all exact.
template <DType kT>
PAGEDATTN_BF16_TARGET inline __m512i fp8_chunk_to_bf16(__m256i codes) {
  const __m512i x = _mm512_slli_epi16(_mm512_cvtepu8_epi16(codes), 8);
  __m512i half = x;
  if constexpr (kT == DType::kF8E4M3) half = bf16::e4m3_high_bytes_to_halves(x);
  __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(half));
  __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(half, 1));
  if constexpr (kT == DType::kF8E4M3) {
    lo = _mm512_mul_ps(lo, _mm512_set1_ps(256.0f));
    hi = _mm512_mul_ps(hi, _mm512_set1_ps(256.0f));
  }
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

template <DType kT>
PAGEDATTN_BF16_TARGET void fp8_row_to_bf16(const std::uint8_t* src, std::int64_t n, std::uint16_t* dst) {
  for (std::int64_t i = 0; i < n; i += 32) {
    const auto m = static_cast<__mmask32>(n - i >= 32 ? ~0u : (1u << (n - i)) - 1u);
    _mm512_mask_storeu_epi16(dst + i, m, fp8_chunk_to_bf16<kT>(_mm256_maskz_loadu_epi8(m, src + i)));
  }
}
}  // namespace

PAGEDATTN_BF16_TARGET void fp8_to_bf16(const std::uint8_t* src, DType dtype, std::int64_t n, std::uint16_t* dst) {
  if (dtype == DType::kF8E4M3) fp8_row_to_bf16<DType::kF8E4M3>(src, n, dst);
  else fp8_row_to_bf16<DType::kF8E5M2>(src, n, dst);
}

}  // namespace pagedattn::cpu
