// Internal, per SIMD target: the f32 micro-kernels of the CPU decode's token-major order (NHD,
// all KV heads of a work item; see DecodeKernel::attend_units in decode.cpp), for every target
// and cache dtype that has no bf16 dot products.
//
// Include this after <hwy/foreach_target.h> in a translation unit that compiles once per target
// (HWY_TARGET_INCLUDE); toggle guard as kv_rows.h.
//
// Rows are read in blocks of 2N dims (N = f32 lanes) as two f32 vectors (load_dim_pair). A bf16
// block is one load of N 32-bit lanes: the even dims are its low halves shifted up, the odd dims
// its high halves masked, so a block costs 3 instructions instead of 4 (two widenings and two
// shifts) and q and the accumulators are kept in that "pair order" (permute_dim_pairs /
// unpermute_dim_pairs); other dtypes read the block as its two halves in dim order.
//
//   unit_logits<kT>       s[j * s_row + h * G + g] = q[h][g] . k_h[j] for a unit's tokens, one
//                         token row at a time across all heads (whole rows in address order)
//   unit_accumulate<kT>   acc[g] += sum_j w[j * s_row + g] v[j] for one KV head's G query heads
#if defined(PAGEDATTN_CPU_DECODE_UNITS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PAGEDATTN_CPU_DECODE_UNITS_INL_H_
#undef PAGEDATTN_CPU_DECODE_UNITS_INL_H_
#else
#define PAGEDATTN_CPU_DECODE_UNITS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <hwy/highway.h>

#include "cpu/decode_rows.h"
#include "cpu/kv_rows.h"
#include "cpu/lane_sums-inl.h"

HWY_BEFORE_NAMESPACE();
namespace pagedattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Dims per block of load_dim_pair: two f32 vectors.
inline std::int64_t dim_pair_block() { return 2 * static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<float>())); }

// The most dims a block may have (the permutations' stack buffer): wider vectors fall back.
inline constexpr std::int64_t kMaxDimPairBlock = 128;

// Whether the token-major f32 kernels take rows of head_dim elements (whole blocks only).
inline bool units_support_head_dim(std::int64_t head_dim) {
#if HWY_TARGET == HWY_SCALAR
  (void)head_dim;
  return false;
#else
  return dim_pair_block() <= kMaxDimPairBlock && head_dim % dim_pair_block() == 0;
#endif
}

// Block [c, c + 2N) of a dim-contiguous row as two f32 vectors: for bf16 the even dims (lo) and
// the odd dims (hi), otherwise [c, c + N) and [c + N, c + 2N).
template <DType kT, class DF, class V = hn::Vec<DF>>
HWY_INLINE void load_dim_pair(DF df, const std::byte* row, std::int64_t c, V& lo, V& hi) {
  if constexpr (kT == DType::kBF16) {
    // The low half of a little-endian 32-bit lane is the even element.
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "pair order assumes little-endian lanes");
    const hn::RebindToUnsigned<DF> du;
    const auto raw = hn::LoadU(du, reinterpret_cast<const std::uint32_t*>(row + c * 2));
    lo = hn::BitCast(df, hn::ShiftLeft<16>(raw));
    hi = hn::BitCast(df, hn::And(raw, hn::Set(du, 0xFFFF0000u)));
  } else {
    const auto N = static_cast<std::size_t>(hn::Lanes(df));
    lo = load_f32<kT>(df, row, static_cast<std::size_t>(c));
    hi = load_f32<kT>(df, row, static_cast<std::size_t>(c) + N);
  }
}

// Whether load_dim_pair<kT> reorders dims (then q must be permuted and the accumulators
// unpermuted with the functions below).
template <DType kT>
constexpr bool kPairOrder = kT == DType::kBF16;

// x [D] in dim order -> pair order (block by block: the even dims, then the odd ones), in place.
inline void permute_dim_pairs(float* HWY_RESTRICT x, std::int64_t D) {
  const std::int64_t B = dim_pair_block(), half = B / 2;
  float t[kMaxDimPairBlock];
  for (std::int64_t b = 0; b < D; b += B) {
    for (std::int64_t k = 0; k < half; ++k) t[k] = x[b + 2 * k], t[half + k] = x[b + 2 * k + 1];
    std::copy_n(t, B, x + b);
  }
}

// The inverse of permute_dim_pairs, in place.
inline void unpermute_dim_pairs(float* HWY_RESTRICT x, std::int64_t D) {
  const std::int64_t B = dim_pair_block(), half = B / 2;
  float t[kMaxDimPairBlock];
  for (std::int64_t b = 0; b < D; b += B) {
    for (std::int64_t k = 0; k < half; ++k) t[2 * k] = x[b + k], t[2 * k + 1] = x[b + half + k];
    std::copy_n(t, B, x + b);
  }
}

#if HWY_TARGET != HWY_SCALAR
// Logits of kG query heads (q rows D apart) against one key row k: s[g]. The even and odd
// halves of a block go to their own accumulators, so every accumulator takes one FMA per block
// and 2 x kG independent chains keep both FMA pipes busy. (Two rows per call, one accumulator
// per row and head, chained two FMAs per block: llvm-mca for Zen 3 put that loop at ~100
// cycles per (row, head) against ~65 for this one.)
template <DType kT, int kG>
HWY_INLINE void logits_row(const float* HWY_RESTRICT q, std::int64_t D, const std::byte* k, float* HWY_RESTRICT s) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  V al[kG], ah[kG];
  for (int g = 0; g < kG; ++g) al[g] = ah[g] = hn::Zero(df);
  for (std::int64_t c = 0; c < D; c += 2 * N) {
    V xl, xh;
    load_dim_pair<kT>(df, k, c, xl, xh);
    for (int g = 0; g < kG; ++g) {
      al[g] = hn::MulAdd(hn::LoadU(df, q + g * D + c), xl, al[g]);
      ah[g] = hn::MulAdd(hn::LoadU(df, q + g * D + c + N), xh, ah[g]);
    }
  }
  if constexpr (kG == 4) {
    store_sums4(df, hn::Add(al[0], ah[0]), hn::Add(al[1], ah[1]), hn::Add(al[2], ah[2]), hn::Add(al[3], ah[3]), s);
  } else {
    HWY_ALIGN float t[4];
    const V a0 = hn::Add(al[0], ah[0]);
    const V a1 = kG == 2 ? hn::Add(al[kG - 1], ah[kG - 1]) : a0;
    store_sums4(df, a0, a1, a0, a1, t);
    for (int g = 0; g < kG; ++g) s[g] = t[g];
  }
}
#endif

// dst[0, bytes) = src[0, bytes) for row bytes (a multiple of 8), in whole vectors.
HWY_INLINE void copy_row_bytes(std::byte* HWY_RESTRICT dst, const std::byte* HWY_RESTRICT src, std::int64_t bytes) {
  const hn::ScalableTag<std::uint8_t> du;
  const hn::CappedTag<std::uint8_t, 8> d8;
  const auto L = static_cast<std::int64_t>(hn::Lanes(du));
  auto* out = reinterpret_cast<std::uint8_t*>(dst);
  const auto* in = reinterpret_cast<const std::uint8_t*>(src);
  std::int64_t off = 0;
  for (; off + L <= bytes; off += L) hn::StoreU(hn::LoadU(du, in + off), du, out + off);
  for (; off < bytes; off += 8) hn::StoreU(hn::LoadU(d8, in + off), d8, out + off);
}

// Where unit_logits copies the unit's V rows, head-major, while it reads the same tokens' K
// rows: dst[(h * tokens + j) * row bytes] = head h of V row j. Read that way the V page streams
// from DRAM in address order beside its K page; read per head by the p.v (one head's rows 2 KiB
// apart across the page) the same bytes came ~15% slower on an AVX2 Zen 3 (docs/perf-notes.md).
struct UnitVCopy {
  std::int64_t v_head_bytes = 0;  // head h of token j's V row is at rows.v[j] + h * v_head_bytes
  std::int64_t tokens = 0;        // rows per head in dst (the unit's capacity)
  std::byte* dst = nullptr;       // [heads][tokens][row bytes]; nullptr: no copy
};

// Token-major logits of a unit of rows.n tokens (NHD: rows.k[j] points at head 0 of token j,
// head h is h * k_head_bytes further): s[j * s_row + h * G + g] = q[h][g] . k_h[j], q being
// [heads][G][D] f32 (pre-scaled, in load_dim_pair's order). next_k (if any, >= rows.n + 1
// entries): row pointers of the next unit, whose same (token, head) rows are prefetched along.
// v_copy (if its dst is set): the unit's V rows are copied head-major along the way.
template <DType kT>
HWY_NOINLINE void unit_logits(const float* HWY_RESTRICT q, std::int64_t heads, std::int64_t G,
                              std::int64_t D, const BlockRows& rows, std::int64_t k_head_bytes,
                              const std::byte* const* next_k, float* HWY_RESTRICT s, std::int64_t s_row,
                              const UnitVCopy& v_copy) {
#if HWY_TARGET == HWY_SCALAR
  (void)q, (void)heads, (void)G, (void)D, (void)rows, (void)k_head_bytes, (void)next_k, (void)s, (void)s_row, (void)v_copy;
#else
  const std::int64_t n = rows.n;
  const std::int64_t row_bytes = D * static_cast<std::int64_t>(sizeof(KVStorage<kT>));
  // The group's tiles of 4, 2 and 1 heads inline in this loop: through for_group_tiles each
  // (row, head) paid a call, a closure and a vzeroupper (~50 instructions around a ~110-instruction
  // tile). Groups of whole 4-head tiles (GQA 32/8, 64/8, ...) take a loop without the 2- and
  // 1-head tails, whose tests and register reloads cost ~18 instructions per (row, KV head).
  // The next unit's rows are prefetched four lines per step (prefetch_span4).
  const auto row_loop = [&](auto whole_fours) {
    for (std::int64_t j = 0; j < n; ++j) {
      for (std::int64_t h = 0; h < heads; ++h) {
        if (next_k != nullptr) prefetch_span4(next_k[j] + h * k_head_bytes, row_bytes);
        const std::byte* k = rows.k[j] + h * k_head_bytes;
        float* sj = s + j * s_row + h * G;
        const float* qh = q + h * G * D;
        std::int64_t g0 = 0;
        for (; g0 + 4 <= G; g0 += 4) logits_row<kT, 4>(qh + g0 * D, D, k, sj + g0);
        if constexpr (!decltype(whole_fours)::value) {
          for (; g0 + 2 <= G; g0 += 2) logits_row<kT, 2>(qh + g0 * D, D, k, sj + g0);
          if (g0 < G) logits_row<kT, 1>(qh + g0 * D, D, k, sj + g0);
        }
        if (v_copy.dst != nullptr) {
          copy_row_bytes(v_copy.dst + (h * v_copy.tokens + j) * row_bytes, rows.v[j] + h * v_copy.v_head_bytes, row_bytes);
        }
      }
    }
  };
  if (G % 4 == 0) {
    row_loop(std::true_type{});
  } else {
    row_loop(std::false_type{});
  }
#endif
}

// Spans of a later unit to prefetch while a kernel runs: `count` spans of `bytes` from each of
// rows[0, count).
struct AheadSpans {
  const std::byte* const* rows = nullptr;
  std::int64_t count = 0, bytes = 0;
};

#if HWY_TARGET != HWY_SCALAR
// acc[g] += sum_j w[j * s_row + g] v[j] for g < kG (acc rows D apart), block by block of 2N
// dims with the block's 2 x kG accumulators in registers across the keys; `ahead` is spread
// over the blocks.
template <DType kT, int kG>
HWY_INLINE void accumulate_tile(float* HWY_RESTRICT acc, std::int64_t D, const std::byte* const* v,
                                std::int64_t n, const float* HWY_RESTRICT w, std::int64_t s_row,
                                const AheadSpans& ahead) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t blocks = D / (2 * N);
  for (std::int64_t c = 0, b = 0; c < D; c += 2 * N, ++b) {
    for (std::int64_t j = ahead.count * b / blocks; j < ahead.count * (b + 1) / blocks; ++j) {
      prefetch_span4(ahead.rows[j], ahead.bytes);
    }
    V al[kG], ah[kG];
    for (int g = 0; g < kG; ++g) al[g] = hn::LoadU(df, acc + g * D + c), ah[g] = hn::LoadU(df, acc + g * D + c + N);
    for (std::int64_t j = 0; j < n; ++j) {
      V xl, xh;
      load_dim_pair<kT>(df, v[j], c, xl, xh);
      for (int g = 0; g < kG; ++g) {
        const V wv = hn::Set(df, w[j * s_row + g]);
        al[g] = hn::MulAdd(wv, xl, al[g]);
        ah[g] = hn::MulAdd(wv, xh, ah[g]);
      }
    }
    for (int g = 0; g < kG; ++g) hn::StoreU(al[g], df, acc + g * D + c), hn::StoreU(ah[g], df, acc + g * D + c + N);
  }
}
#endif

// acc [G][D] (one KV head's query heads, load_dim_pair's order) += sum_j w[j * s_row + g] v[j]
// for the unit's n rows v[j] of that head, prefetching `ahead` along.
template <DType kT>
HWY_NOINLINE void unit_accumulate(float* HWY_RESTRICT acc, std::int64_t G, std::int64_t D,
                                  const std::byte* const* v, std::int64_t n, const float* HWY_RESTRICT w,
                                  std::int64_t s_row, const AheadSpans& ahead) {
#if HWY_TARGET == HWY_SCALAR
  (void)acc, (void)G, (void)D, (void)v, (void)n, (void)w, (void)s_row, (void)ahead;
#else
  bool first = true;
  for_group_tiles(G, [&]<int kG>(std::int64_t g0) {
    accumulate_tile<kT, kG>(acc + g0 * D, D, v, n, w + g0, s_row, first ? ahead : AheadSpans{});
    first = false;
  });
#endif
}

}  // namespace pagedattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
