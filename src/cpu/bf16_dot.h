// Internal: AVX512-BF16 building blocks shared by the CPU prefill and decode micro-kernels.
//
// VDPBF16PS multiplies pairs of bf16 and adds both products into one f32 lane:
//   acc[i] += a[2i] * b[2i] + a[2i+1] * b[2i+1].
// Products of two bf16 are exact in f32, so q.k of bf16 inputs loses nothing to the format.
// Everything here carries its own target attribute: include this header only from translation
// units whose callers checked bf16_dot_supported() first, so the rest of the library keeps its
// baseline ISA.
#pragma once

// GCC 12 reports the _mm512_undefined_* placeholders inside some AVX-512 intrinsics (unpack,
// extract) as maybe-uninitialized once they are inlined; the values are fully overwritten.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <cstring>

#include "cpu/cpu_features.h"

#define PAGEDATTN_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace pagedattn::cpu {

namespace bf16 {

inline constexpr int kLanes = 16;  // f32 lanes of a vector, or bf16 pairs

// One 32-bit pair (two consecutive bf16) broadcast to every lane.
PAGEDATTN_BF16_TARGET inline __m512i broadcast_pair(const void* p) {
  std::int32_t x;
  std::memcpy(&x, p, sizeof(x));
  return _mm512_set1_epi32(x);
}

PAGEDATTN_BF16_TARGET inline __m512 dot_pairs(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

// 16 f32 rounded to bf16 (nearest even), as 16 u16 in a 256-bit vector.
PAGEDATTN_BF16_TARGET inline __m256i to_bf16(__m512 x) {
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
}

// fp8 codes in the upper byte of 16-bit lanes (zero low bytes) as IEEE halves: e5m2 already is
// one; e4m3's sign stays and its 7 magnitude bits move down one into the half's exponent and
// mantissa, which gives the value times 2^-8, subnormals included (bias 15 against 7), and its
// NaN codes (0x7f, 0xff) become a half NaN.
PAGEDATTN_BF16_TARGET inline __m512i e4m3_high_bytes_to_halves(__m512i x) {
  const __m512i half = _mm512_and_si512(_mm512_srai_epi16(x, 1), _mm512_set1_epi16(static_cast<short>(0xbf80)));
  const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_slli_epi16(x, 1), _mm512_set1_epi16(static_cast<short>(0xfe00)));
  return _mm512_mask_mov_epi16(half, nan, _mm512_set1_epi16(0x7e00));
}

}  // namespace bf16
}  // namespace pagedattn::cpu
