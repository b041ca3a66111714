// AVX512-BF16 micro-kernels of the CPU decode (see decode_bf16.h). They run only after
// bf16_dot_supported() said yes; the Highway driver in decode.cpp does the online softmax.
#include "cpu/decode_bf16.h"

#include "cpu/bf16_dot.h"

#include <type_traits>

namespace pagedattn::cpu {

namespace {

using bf16::dot_pairs;
using bf16::kLanes;

constexpr std::int64_t kChunk = 2 * kLanes;  // bf16 elements of one vector
// Locality hint of the token-major order's prefetches of the next unit (prefetcht2): measured
// ~5% faster than prefetcht0 for them; the just-in-time L1 prefetches stay prefetcht0.
constexpr int kAheadLocality = 1;

// The elements of chunk [c, c + 32) that lie inside a row of D elements.
inline __mmask32 chunk_mask(std::int64_t c, std::int64_t D) {
  return c + kChunk <= D ? ~__mmask32{0} : static_cast<__mmask32>((1ull << (D - c)) - 1u);
}

// Elements [c, c + 32) of a bf16 row, zero outside `m` (masked: no read past the row).
PAGEDATTN_BF16_TARGET inline __m512i load_chunk(const std::byte* row, std::int64_t c,
                                                __mmask32 m) {
  return _mm512_maskz_loadu_epi16(m, reinterpret_cast<const std::uint16_t*>(row) + c);
}

// [sum(a), sum(b), sum(c), sum(d)]: a transposing reduction, 8 shuffles for 4 sums.
PAGEDATTN_BF16_TARGET inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // Per 128-bit block: ab = [a0+a2, b0+b2, a1+a3, b1+b3], cd likewise.
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512d abd = _mm512_castps_pd(ab), cdd = _mm512_castps_pd(cd);
  // Per block: partial [a, b, c, d].
  const __m512 x = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(abd, cdd)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(abd, cdd)));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(x),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// The even and odd dims of a chunk of 32 bf16 as two vectors of f32: lane i of the first is
// dim 2i (the pair's low half shifted up), of the second dim 2i + 1 (the high half, masked).
PAGEDATTN_BF16_TARGET __attribute__((always_inline)) inline void split_pairs(__m512i x, __m512& even, __m512& odd) {
  even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// f.template operator()<kT>() for the FMA units' row dtype kT (bf16, f16 or an fp8).
template <class F>
inline void with_rows_dtype(DType rows_dtype, const F& f) {
  switch (rows_dtype) {
    case DType::kF16: return f.template operator()<DType::kF16>();
    case DType::kF8E4M3: return f.template operator()<DType::kF8E4M3>();
    case DType::kF8E5M2: return f.template operator()<DType::kF8E5M2>();
    default: return f.template operator()<DType::kBF16>();
  }
}

// Bytes of one cache element of the rows the FMA units read.
template <DType kT>
inline constexpr std::int64_t kElemBytes = is_fp8(kT) ? 1 : 2;

// Chunk [c, c + 32) of a row as split_pairs leaves it, the row's elements being bf16 (kT), IEEE
// halves or fp8 codes: a half's even dims are the 32-bit lanes' low halves (VPMOVDW), the odd ones
// the high halves. fp8 comes unscaled, and e4m3 as its value / kE4m3RowScale: each code
// goes into the upper byte of a 16-bit lane, even codes (shifted up) and odd ones (masked) apart,
// which for e5m2 is already its half (e4m3: bf16::e4m3_high_bytes_to_halves). About half the
// instructions of widening the bytes first.
template <DType kT>
PAGEDATTN_BF16_TARGET __attribute__((always_inline)) inline void load_split(const std::byte* row, std::int64_t c,
                                                                          __m512& even, __m512& odd) {
  if constexpr (kT == DType::kBF16) {
    split_pairs(load_chunk(row, c, ~__mmask32{0}), even, odd);
  } else if constexpr (kT == DType::kF16) {
    const __m512i half = load_chunk(row, c, ~__mmask32{0});
    even = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(half));
    odd = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(half, 16)));
  } else {
    const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c));
    const __m256i even_codes = _mm256_slli_epi16(codes, 8);
    const __m256i odd_codes = _mm256_and_si256(codes, _mm256_set1_epi16(static_cast<short>(0xff00)));
    if constexpr (kT == DType::kF8E5M2) {
      even = _mm512_cvtph_ps(even_codes);
      odd = _mm512_cvtph_ps(odd_codes);
    } else {
      static_assert(kT == DType::kF8E4M3);
      const __m512i half =
          bf16::e4m3_high_bytes_to_halves(_mm512_inserti64x4(_mm512_castsi256_si512(even_codes), odd_codes, 1));
      even = _mm512_cvtph_ps(_mm512_castsi512_si256(half));
      odd = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(half, 1));
    }
  }
}

// a[t][g] = lane-wise partial sums of the dot product of query head g (row q[g * q_stride])
// with key row k[t], for four key rows: each q chunk (from L1) feeds four dot products.
// Q = std::uint16_t: bf16 q, VDPBF16PS on the raw K chunks. Q = float: f32 q in pair order (each
// chunk's 16 even dims, then its 16 odd ones; head_dim a multiple of 32), the K chunks split into
// the same order, two FMAs a chunk: twice the instructions for the same products, which pays
// where VDPBF16PS issues at under half the FMA rate (decode_bf16.h).
template <int kG, class Q, DType kT = DType::kBF16>
PAGEDATTN_BF16_TARGET __attribute__((always_inline)) inline void dot_quad(
    const Q* q, std::int64_t q_stride, std::int64_t D, const std::byte* const* k,
    __m512 (&a)[4][kG]) {
  constexpr int kTok = 4;
  #pragma GCC unroll 16
  for (int t = 0; t < kTok; ++t) {
    #pragma GCC unroll 16
    for (int g = 0; g < kG; ++g) a[t][g] = _mm512_setzero_ps();
  }
  for (std::int64_t c = 0; c < D; c += kChunk) {
    if constexpr (std::is_same_v<Q, float>) {
      __m512 e[kTok], o[kTok];
      #pragma GCC unroll 16
      for (int t = 0; t < kTok; ++t) load_split<kT>(k[t], c, e[t], o[t]);
      #pragma GCC unroll 16
      for (int g = 0; g < kG; ++g) {
        const __m512 qe = _mm512_load_ps(q + g * q_stride + c), qo = _mm512_load_ps(q + g * q_stride + c + kLanes);
        #pragma GCC unroll 16
        for (int t = 0; t < kTok; ++t) a[t][g] = _mm512_fmadd_ps(o[t], qo, _mm512_fmadd_ps(e[t], qe, a[t][g]));
      }
    } else {
      __m512i x[kTok];
      const __mmask32 m = chunk_mask(c, D);
      #pragma GCC unroll 16
      for (int t = 0; t < kTok; ++t) x[t] = load_chunk(k[t], c, m);
      #pragma GCC unroll 16
      for (int g = 0; g < kG; ++g) {
        const __m512i qv = _mm512_load_si512(q + g * q_stride + c);
        #pragma GCC unroll 16
        for (int t = 0; t < kTok; ++t) a[t][g] = dot_pairs(a[t][g], qv, x[t]);
      }
    }
  }
}

// Logits of kG query heads, four keys at a time: each q chunk (from L1) feeds four dot
// products; a missing fourth key repeats the last row and its sum is not stored.
template <int kG>
PAGEDATTN_BF16_TARGET void logits_tile(const std::uint16_t* q, std::int64_t q_stride,
                                       std::int64_t D, float scale, const BlockRows& rows,
                                       PrefetchStream* near, PrefetchStream* far, float* s) {
  constexpr int kTok = 4;
  const std::int64_t n = rows.n;
  const std::int64_t quads = std::max<std::int64_t>(1, (n + kTok - 1) / kTok);
  const std::int64_t near_step = near ? (near->count + quads - 1) / quads : 0;
  const std::int64_t far_step = far ? (far->count + quads - 1) / quads : 0;
  const __m128 vscale = _mm_set1_ps(scale);
  for (std::int64_t j = 0; j < n; j += kTok) {
    if (near) near->step(near_step);
    if (far) far->step(far_step);
    // Rows a few tokens ahead, from L2 into L1 just in time (see decode.cpp). Clamped rather
    // than guarded: a branch here keeps GCC from holding the accumulators in registers.
    #pragma GCC unroll 16
    for (int t = 0; t < kTok; ++t) {
      prefetch_span(rows.k[std::min<std::int64_t>(j + kDecodeAhead + t, n - 1)], D * 2);
    }
    const std::byte* k[kTok];
    #pragma GCC unroll 16
    for (int t = 0; t < kTok; ++t) k[t] = rows.k[std::min<std::int64_t>(j + t, n - 1)];
    __m512 a[kTok][kG];
    dot_quad<kG>(q, q_stride, D, k, a);
    const auto valid = static_cast<__mmask8>(n - j >= kTok ? 0xf : (1u << (n - j)) - 1u);
    #pragma GCC unroll 16
    for (int g = 0; g < kG; ++g) {
      const __m128 sums = _mm_mul_ps(sum4(a[0][g], a[1][g], a[2][g], a[3][g]), vscale);
      _mm_mask_storeu_ps(s + g * kDecodeBlock + j, valid, sums);
    }
  }
  if (near) near->step(near->count);  // whatever the quads left
  if (far) far->step(far->count);
}

// Logits of kG query heads (rows q[g * q_stride]) for the four token rows k[0..3] of one KV
// head, stored token-major: s[t * s_row + g] for the first `ntok` tokens t.
// Q: std::uint16_t (bf16 q, VDPBF16PS) or float (pair-ordered f32 q, FMAs).
template <int kG, class Q, DType kT = DType::kBF16>
PAGEDATTN_BF16_TARGET __attribute__((always_inline)) inline void logits_quad(
    const Q* q, std::int64_t q_stride, std::int64_t D, __m128 vscale,
    const std::byte* const* k, std::int64_t ntok, float* s, std::int64_t s_row) {
  constexpr int kTok = 4;
  __m512 a[kTok][kG];
  dot_quad<kG, Q, kT>(q, q_stride, D, k, a);
  if constexpr (kG == 4) {
    // One transposing reduction per token gives its four heads' logits.
    #pragma GCC unroll 16
    for (int t = 0; t < kTok; ++t) {
      if (t < ntok) _mm_storeu_ps(s + t * s_row, _mm_mul_ps(sum4(a[t][0], a[t][1], a[t][2], a[t][3]), vscale));
    }
  } else {
    #pragma GCC unroll 16
    for (int g = 0; g < kG; ++g) {
      alignas(16) float sums[kTok];
      _mm_store_ps(sums, _mm_mul_ps(sum4(a[0][g], a[1][g], a[2][g], a[3][g]), vscale));
      #pragma GCC unroll 16
      for (int t = 0; t < kTok; ++t) {
        if (t < ntok) s[t * s_row + g] = sums[t];
      }
    }
  }
}

// The p.v's accumulators of chunks [c0, c0 + kC * 32) of kG heads (two vectors a chunk, in either
// kernel's pair order) loaded from acc, or stored back.
template <int kG, int kC>
PAGEDATTN_BF16_TARGET __attribute__((always_inline)) inline void tile_accumulators(
    float* acc, std::int64_t acc_stride, std::int64_t c0, __m512 (&a)[kC][kG][2], bool store) {
  #pragma GCC unroll 16
  for (int k = 0; k < kC; ++k) {
    #pragma GCC unroll 16
    for (int g = 0; g < kG; ++g) {
      #pragma GCC unroll 16
      for (int h = 0; h < 2; ++h) {
        float* at = acc + g * acc_stride + c0 + k * kChunk + h * kLanes;
        if (store) _mm512_storeu_ps(at, a[k][g][h]);
        else a[k][g][h] = _mm512_loadu_ps(at);
      }
    }
  }
}

// acc chunks [c0, c0 + kC * 32) of kG heads += the block's weighted V rows, two keys per step:
// the rows are interleaved (unpack lo/hi of 16-bit elements) into pairs matching the weight
// pairs p[j] | p[j+1] << 16. kC * kG * 2 accumulators stay in registers across the block.
// kPf: each key pair also prefetches the same chunks of rows pf_v[j], pf_v[j + 1] (the next
// unit's V rows of this head, in the token-major order), a fixed budget per step, no branch.
template <int kG, int kC, bool kPf = false>
PAGEDATTN_BF16_TARGET void accumulate_tile(float* acc, std::int64_t acc_stride, std::int64_t D,
                                           std::int64_t c0, const BlockRows& rows,
                                           const std::uint32_t* w, std::int64_t w_g,
                                           std::int64_t w_j, const std::byte* const* pf_v = nullptr) {
  __m512 a[kC][kG][2];
  tile_accumulators<kG, kC>(acc, acc_stride, c0, a, false);
  const std::int64_t n = rows.n;
  __mmask32 mask[kC];
  #pragma GCC unroll 16
  for (int k = 0; k < kC; ++k) mask[k] = chunk_mask(c0 + k * kChunk, D);
  const std::uint32_t* wj = w;  // this key pair's weights
  for (std::int64_t j = 0; j < n; j += 2, wj += w_j) {
    // An odd block's last weight pair has a zero high half; its partner row is any valid row.
    const std::byte* v0 = rows.v[j];
    const std::byte* v1 = j + 1 < n ? rows.v[j + 1] : v0;
    if constexpr (kPf) {
      #pragma GCC unroll 16
      for (int k = 0; k < kC; ++k) {
        __builtin_prefetch(pf_v[j] + (c0 + k * kChunk) * 2, 0, kAheadLocality);
        __builtin_prefetch(pf_v[j + 1] + (c0 + k * kChunk) * 2, 0, kAheadLocality);
      }
    }
    __m512i lo[kC], hi[kC];
    #pragma GCC unroll 16
    for (int k = 0; k < kC; ++k) {
      const __m512i x0 = load_chunk(v0, c0 + k * kChunk, mask[k]);
      const __m512i x1 = load_chunk(v1, c0 + k * kChunk, mask[k]);
      lo[k] = _mm512_unpacklo_epi16(x0, x1);
      hi[k] = _mm512_unpackhi_epi16(x0, x1);
    }
    #pragma GCC unroll 16
    for (int g = 0; g < kG; ++g) {
      const __m512i wv = _mm512_set1_epi32(static_cast<int>(wj[g * w_g]));
      #pragma GCC unroll 16
      for (int k = 0; k < kC; ++k) {
        a[k][g][0] = dot_pairs(a[k][g][0], lo[k], wv);
        a[k][g][1] = dot_pairs(a[k][g][1], hi[k], wv);
      }
    }
  }
  tile_accumulators<kG, kC>(acc, acc_stride, c0, a, true);
}

// accumulate_tile on f32 FMAs, one key per step: acc chunks in pair order (16 even dims, then
// 16 odd ones), the f32 weights w[j * w_j + g * w_g] (not rounded to bf16), V chunks split into
// the same order. The next unit's V rows are prefetched as by accumulate_tile (kC chunks a key).
template <int kG, int kC, DType kT = DType::kBF16>
PAGEDATTN_BF16_TARGET void accumulate_tile_fma(float* acc, std::int64_t acc_stride, std::int64_t c0,
                                               const BlockRows& rows, const float* w, std::int64_t w_g,
                                               std::int64_t w_j, const std::byte* const* pf_v) {
  __m512 a[kC][kG][2];
  tile_accumulators<kG, kC>(acc, acc_stride, c0, a, false);
  const std::int64_t n = rows.n;
  for (std::int64_t j = 0; j < n; ++j) {
    if (pf_v != nullptr) {
      #pragma GCC unroll 16
      for (int k = 0; k < kC; ++k) __builtin_prefetch(pf_v[j] + (c0 + k * kChunk) * kElemBytes<kT>, 0, kAheadLocality);
    }
    __m512 e[kC], o[kC];
    #pragma GCC unroll 16
    for (int k = 0; k < kC; ++k) load_split<kT>(rows.v[j], c0 + k * kChunk, e[k], o[k]);
    const float* wj = w + j * w_j;
    #pragma GCC unroll 16
    for (int g = 0; g < kG; ++g) {
      const __m512 wv = _mm512_set1_ps(wj[g * w_g]);
      #pragma GCC unroll 16
      for (int k = 0; k < kC; ++k) {
        a[k][g][0] = _mm512_fmadd_ps(e[k], wv, a[k][g][0]);
        a[k][g][1] = _mm512_fmadd_ps(o[k], wv, a[k][g][1]);
      }
    }
  }
  tile_accumulators<kG, kC>(acc, acc_stride, c0, a, true);
}

// All chunks of kG heads: the widest chunk tiles first (about 16 accumulators), then narrower.
template <int kG>
PAGEDATTN_BF16_TARGET void accumulate_heads(float* acc, std::int64_t acc_stride, std::int64_t D,
                                            const BlockRows& rows, const std::uint32_t* w,
                                            std::int64_t w_g, std::int64_t w_j,
                                            PrefetchStream* pf, const std::byte* const* pf_v) {
  constexpr int kWide = kG >= 8 ? 1 : 8 / kG;
  const std::int64_t Dp = bf16_padded_dim(D);
  // The prefetch stream goes out between chunk tiles, a share per chunk.
  const std::int64_t pf_step = pf ? (pf->count * kChunk + Dp - 1) / Dp : 0;
  std::int64_t c = 0;
  auto pass = [&]<int kC>() {
    for (; c + kC * kChunk <= Dp; c += kC * kChunk) {
      if (pf) pf->step(pf_step * kC);
      if (pf_v) accumulate_tile<kG, kC, true>(acc, acc_stride, D, c, rows, w, w_g, w_j, pf_v);
      else accumulate_tile<kG, kC>(acc, acc_stride, D, c, rows, w, w_g, w_j);
    }
  };
  pass.template operator()<kWide>();
  if constexpr (kWide > 4) pass.template operator()<4>();
  if constexpr (kWide > 2) pass.template operator()<2>();
  if constexpr (kWide > 1) pass.template operator()<1>();
  if (pf) pf->step(pf->count);
}

}  // namespace

PAGEDATTN_BF16_TARGET void bf16_decode_logits(const std::uint16_t* q, std::int64_t q_stride,
                                              std::int64_t group, std::int64_t head_dim,
                                              float scale, const BlockRows& rows,
                                              PrefetchStream* near, PrefetchStream* far,
                                              float* s) {
  bool first = true;
  for_group_tiles(group, [&]<int kG>(std::int64_t g0) {
    logits_tile<kG>(q + g0 * q_stride, q_stride, head_dim, scale, rows, first ? near : nullptr,
                    first ? far : nullptr, s + g0 * kDecodeBlock);
    first = false;
  });
}

namespace {

template <class Q, DType kT = DType::kBF16>
PAGEDATTN_BF16_TARGET void logits_heads(const Q* q, std::int64_t q_stride, std::int64_t heads,
                                        std::int64_t group, std::int64_t head_dim, float scale,
                                        const BlockRows& rows, std::int64_t k_head_bytes,
                                        const std::byte* const* next_k, float* s,
                                        std::int64_t s_row, std::int64_t jit_bytes) {
  constexpr int kTok = 4;
  const std::int64_t n = rows.n, G = group, D = head_dim;
  const __m128 vscale = _mm_set1_ps(scale);
  if (jit_bytes > 0) {
    for (std::int64_t t = 0; t < std::min<std::int64_t>(kTok, n); ++t) prefetch_span4(rows.k[t], jit_bytes);
  }
  for (std::int64_t j = 0; j < n; j += kTok) {
    if (jit_bytes > 0) {
      for (std::int64_t t = j + kTok; t < std::min(n, j + 2 * kTok); ++t) prefetch_span4(rows.k[t], jit_bytes);
    }
    const std::byte* k0[kTok];
    #pragma GCC unroll 16
    for (int t = 0; t < kTok; ++t) k0[t] = rows.k[std::min<std::int64_t>(j + t, n - 1)];
    const std::int64_t ntok = std::min<std::int64_t>(kTok, n - j);
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::byte* k[kTok];
      #pragma GCC unroll 16
      for (int t = 0; t < kTok; ++t) k[t] = k0[t] + h * k_head_bytes;
      if (next_k) {  // the same quad and head of the next unit
        #pragma GCC unroll 16
        for (int t = 0; t < kTok; ++t) {
          for (std::int64_t off = 0; off < D * kElemBytes<kT>; off += 64) __builtin_prefetch(next_k[j + t] + h * k_head_bytes + off, 0, kAheadLocality);
        }
      }
      const Q* qh = q + h * G * q_stride;
      float* sh = s + j * s_row + h * G;
      std::int64_t g0 = 0;
      for (; g0 + 4 <= G; g0 += 4) {
        logits_quad<4, Q, kT>(qh + g0 * q_stride, q_stride, D, vscale, k, ntok, sh + g0, s_row);
      }
      if (g0 + 2 <= G) {
        logits_quad<2, Q, kT>(qh + g0 * q_stride, q_stride, D, vscale, k, ntok, sh + g0, s_row);
        g0 += 2;
      }
      if (g0 < G) logits_quad<1, Q, kT>(qh + g0 * q_stride, q_stride, D, vscale, k, ntok, sh + g0, s_row);
    }
  }
}

}  // namespace

PAGEDATTN_BF16_TARGET void bf16_decode_logits_heads(const std::uint16_t* q, std::int64_t q_stride,
                                                    std::int64_t heads, std::int64_t group,
                                                    std::int64_t head_dim, float scale,
                                                    const BlockRows& rows,
                                                    std::int64_t k_head_bytes,
                                                    const std::byte* const* next_k,
                                                    float* s, std::int64_t s_row,
                                                    std::int64_t jit_bytes) {
  logits_heads(q, q_stride, heads, group, head_dim, scale, rows, k_head_bytes, next_k, s, s_row, jit_bytes);
}

PAGEDATTN_BF16_TARGET void bf16_decode_logits_heads_fma(const float* q, std::int64_t q_stride,
                                                        std::int64_t heads, std::int64_t group,
                                                        std::int64_t head_dim, const BlockRows& rows,
                                                        std::int64_t k_head_bytes,
                                                        const std::byte* const* next_k,
                                                        float* s, std::int64_t s_row,
                                                        std::int64_t jit_bytes, DType rows_dtype) {
  with_rows_dtype(rows_dtype, [&]<DType kT>() {
    logits_heads<float, kT>(q, q_stride, heads, group, head_dim, 1.0f, rows, k_head_bytes, next_k, s, s_row,
                            jit_bytes);
  });
}

namespace {
template <DType kT>
PAGEDATTN_BF16_TARGET void accumulate_fma(float* acc, std::int64_t group, std::int64_t head_dim, const BlockRows& rows,
                                          const float* w, std::int64_t w_g, std::int64_t w_j,
                                          const std::byte* const* pf_v) {
  // Groups in tiles of 4, 2 and 1 heads, chunks two at a time (16 accumulators at 4 heads).
  for_group_tiles(group, [&]<int kG>(std::int64_t g0) {
    constexpr int kC = kG >= 4 ? 2 : 4 / kG;
    std::int64_t c = 0;
    for (; c + kC * kChunk <= head_dim; c += kC * kChunk) {
      accumulate_tile_fma<kG, kC, kT>(acc + g0 * head_dim, head_dim, c, rows, w + g0 * w_g, w_g, w_j,
                                        g0 == 0 ? pf_v : nullptr);
    }
    for (; c < head_dim; c += kChunk) {
      accumulate_tile_fma<kG, 1, kT>(acc + g0 * head_dim, head_dim, c, rows, w + g0 * w_g, w_g, w_j,
                                       g0 == 0 ? pf_v : nullptr);
    }
  });
}
}  // namespace

PAGEDATTN_BF16_TARGET void bf16_decode_accumulate_fma(float* acc, std::int64_t group, std::int64_t head_dim,
                                                      const BlockRows& rows, const float* w,
                                                      std::int64_t w_g, std::int64_t w_j,
                                                      const std::byte* const* pf_v, DType rows_dtype) {
  with_rows_dtype(rows_dtype,
                  [&]<DType kT>() { accumulate_fma<kT>(acc, group, head_dim, rows, w, w_g, w_j, pf_v); });
}

PAGEDATTN_BF16_TARGET void bf16_decode_accumulate(float* acc, std::int64_t group,
                                                  std::int64_t head_dim, const BlockRows& rows,
                                                  const float* p, std::int64_t p_stride,
                                                  std::uint16_t* pairs, PrefetchStream* pf) {
  // Weights to bf16: consecutive u16 are the pairs (p[j] | p[j+1] << 16), zero past n.
  const std::int64_t n = rows.n;
  for (std::int64_t g = 0; g < group; ++g) {
    for (std::int64_t i = 0; i < n; i += kLanes) {
      const auto m = static_cast<__mmask16>(n - i >= kLanes ? 0xffff : (1u << (n - i)) - 1u);
      const __m512 x = _mm512_maskz_loadu_ps(m, p + g * p_stride + i);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pairs + g * p_stride + i), bf16::to_bf16(x));
    }
  }
  bf16_decode_accumulate_pairs(acc, group, head_dim, rows,
                               reinterpret_cast<const std::uint32_t*>(pairs), p_stride / 2, 1, pf,
                               nullptr);
}

PAGEDATTN_BF16_TARGET void bf16_decode_accumulate_pairs(float* acc, std::int64_t group,
                                                        std::int64_t head_dim,
                                                        const BlockRows& rows,
                                                        const std::uint32_t* w, std::int64_t w_g,
                                                        std::int64_t w_j, PrefetchStream* pf,
                                                        const std::byte* const* pf_v) {
  const std::int64_t stride = bf16_padded_dim(head_dim);
  bool first = true;
  for_group_tiles(group, [&]<int kG>(std::int64_t g0) {
    accumulate_heads<kG>(acc + g0 * stride, stride, head_dim, rows, w + g0 * w_g, w_g, w_j,
                         first ? pf : nullptr, first ? pf_v : nullptr);
    first = false;
  });
}

PAGEDATTN_BF16_TARGET void bf16_pack_pairs(const float* e, std::int64_t row, std::int64_t n,
                                           std::int64_t width, std::uint32_t* w) {
  for (std::int64_t j = 0; j < n; j += 2) {
    for (std::int64_t c = 0; c < width; c += kLanes) {
      const __m512i lo = _mm512_cvtepu16_epi32(bf16::to_bf16(_mm512_loadu_ps(e + j * row + c)));
      const __m512i hi = j + 1 < n
          ? _mm512_cvtepu16_epi32(bf16::to_bf16(_mm512_loadu_ps(e + (j + 1) * row + c)))
          : _mm512_setzero_si512();
      _mm512_storeu_si512(w + (j / 2) * width + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

void bf16_unpermute_acc(const float* src, std::int64_t head_dim, float* dst) {
  // In a chunk, lanes [0, 16) hold dims 8b + i and lanes [16, 32) dims 8b + 4 + i, for 128-bit
  // block b < 4 and i < 4 (unpack lo/hi work within 128-bit blocks).
  for (std::int64_t d = 0; d < head_dim; ++d) {
    const std::int64_t r = d % kChunk, b = r / 8, w = r % 8;
    dst[d] = src[d - r + (w < 4 ? 4 * b + w : kLanes + 4 * b + w - 4)];
  }
}

}  // namespace pagedattn::cpu
