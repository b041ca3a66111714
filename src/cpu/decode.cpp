// Paged decode on the CPU: SIMD through Highway (runtime dispatch), threads through OpenMP.
//
// A work item is (sequence, KV heads, key range); see decode_plan.h. For each KV head the
// group_size query heads that share it are processed together, so every K/V row is read from
// memory once per group. Keys are consumed in blocks of up to kBlock tokens with an online
// softmax in f32 (running max m, sum l and unnormalised output acc [group][head_dim]):
//   1. logits s[g][j] = (q[g] * scale) . k[j]  (+ soft-cap, + ALiBi)
//   2. m' = max(m, max_j s), acc *= exp(m - m'), l = l * exp(m - m') + sum_j exp(s - m')
//   3. acc[g] += sum_j exp(s[g][j] - m') * v[j]
// (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"). Decode is
// memory bound, so the kernel's job is to stream K/V at full bandwidth: one page-table lookup
// per page, software prefetch of the next block while the current one is computed, and
// logits reduced four dot products at a time so the arithmetic stays below the memory time.
//
// Dim-contiguous layouts (NHD, HND) are read in place in their dtype; other layouts (vLLM
// split K/V) are first gathered, a page at a time, into an f32 tile [block][head_dim].
// With q, KV and out all bf16 on a CPU with AVX512-BF16, dim-contiguous rows go through the
// bf16 dot-product micro-kernels of decode_bf16.h instead of f32 FMAs (half the instructions,
// no conversions); the online softmax stays here, in f32.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/decode.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <hwy/aligned_allocator.h>
#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/env_switch.h"
#include "cpu/cpu_backend.h"
#include "cpu/decode_amx.h"
#include "cpu/decode_split_amx.h"
#include "cpu/decode_bf16.h"
#include "cpu/decode_output.h"
#include "cpu/decode_plan.h"
#include "cpu/decode_rows.h"
#include "cpu/decode_units-inl.h"
#include "cpu/exp_nonpositive-inl.h"
#include "cpu/kv_rows.h"
#include "cpu/lane_sums-inl.h"
#include "cpu/row_convert.h"

HWY_BEFORE_NAMESPACE();
namespace pagedattn::cpu::HWY_NAMESPACE {
namespace {

using detail::AttentionProblem;

constexpr std::int64_t kBlock = kDecodeBlock;
constexpr std::int64_t kCacheLine = kDecodeCacheLine;
constexpr std::int64_t kAhead = kDecodeAhead;
constexpr std::int64_t kUnit = 16;  // tokens per unit of the token-major order

// Query heads per logits tile: 4 tokens x kG heads of accumulators stay in registers only where
// the target has 32 vector registers; with 16 (x86 before AVX-512) 4 x 4 of them spill, and the
// spilled chains through the stack measured 3x slower than the FMAs.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3 || (defined(HWY_SSE2) && HWY_TARGET == HWY_SSE2)
constexpr int kLogitTile = 2;
#else
constexpr int kLogitTile = 4;
#endif
// Floats per token of a unit's token-major logits: all query heads, padded to 16 lanes for the
// bf16 kernels' pairing, else to whole f32 vectors.
// True when a unit's n rows are kUnit rows evenly spaced (one tile load reads them all).
inline bool evenly_spaced(const std::byte* const* rows, std::int64_t n) {
  if (n != kUnit) return false;
  const std::ptrdiff_t stride = rows[1] - rows[0];
  for (std::int64_t j = 2; j < n; ++j) {
    if (rows[j] - rows[j - 1] != stride) return false;
  }
  return true;
}

inline std::int64_t unit_row(std::int64_t query_heads, bool bf16) {
  const std::int64_t lanes = bf16 ? 16 : static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  return (query_heads + lanes - 1) / lanes * lanes;
}

// Per-thread f32 scratch for items of `heads` KV heads.
struct Scratch {
  hwy::AlignedFreeUniquePtr<float[]> q, acc, s, m, l, k_tile, v_tile;
  // bf16 path: q [heads][group][padded dim] bf16, pair-ordered acc likewise, weight pairs.
  hwy::AlignedFreeUniquePtr<std::uint16_t[]> q16, pairs;
  hwy::AlignedFreeUniquePtr<float[]> acc16, alpha;
  // f32 token-major units: the unit's V rows, head-major [heads][kUnit][row bytes] (UnitVCopy).
  hwy::AlignedFreeUniquePtr<std::byte[]> v_unit;
  // Split-layout AMX units that cannot be read in place: K [dim / 8][16][8] and V [dim][16] bf16.
  hwy::AlignedFreeUniquePtr<std::uint16_t[]> k_split, v_split;

  Scratch(std::int64_t heads, std::int64_t group, std::int64_t head_dim, bool tiles, bool bf16,
          bool token_major, bool copy_v, std::int64_t kv_row_bytes) {
    const auto hg = static_cast<std::size_t>(heads * group);
    const auto hgd = hg * static_cast<std::size_t>(head_dim);
    const auto row = static_cast<std::size_t>(unit_row(heads * group, bf16));  // >= hg, padded
    q = hwy::AllocateAligned<float>(hgd);    // [heads][group][head_dim], pre-scaled
    acc = hwy::AllocateAligned<float>(hgd);  // [heads][group][head_dim]
    // [group][kBlock], or [kUnit][row] (token-major units)
    const std::size_t s_size = std::max<std::size_t>(static_cast<std::size_t>(group * kBlock), kUnit * row);
    s = hwy::AllocateAligned<float>(s_size);
    std::fill_n(s.get(), s_size, 0.0f);
    m = hwy::AllocateAligned<float>(row);     // [heads][group]
    l = hwy::AllocateAligned<float>(row);
    if (tiles) {
      k_tile = hwy::AllocateAligned<float>(static_cast<std::size_t>(kBlock * head_dim));
      v_tile = hwy::AllocateAligned<float>(static_cast<std::size_t>(kBlock * head_dim));
    }
    if (bf16) {
      const auto padded = hg * static_cast<std::size_t>(bf16_padded_dim(head_dim));
      q16 = hwy::AllocateAligned<std::uint16_t>(padded);
      acc16 = hwy::AllocateAligned<float>(padded);
      // [group][kBlock] u16, or [kUnit / 2][row] u32 (token-major units)
      pairs = hwy::AllocateAligned<std::uint16_t>(std::max<std::size_t>(static_cast<std::size_t>(group * kBlock), kUnit * row));
    }
    if (token_major) alpha = hwy::AllocateAligned<float>(row);
    if (token_major && !bf16 && copy_v) v_unit = hwy::AllocateAligned<std::byte>(static_cast<std::size_t>(heads * kUnit * kv_row_bytes));
  }
  void allocate_split_units(std::int64_t head_dim) {
    k_split = hwy::AllocateAligned<std::uint16_t>(static_cast<std::size_t>(head_dim * kUnit));
    v_split = hwy::AllocateAligned<std::uint16_t>(static_cast<std::size_t>(head_dim * kUnit));
  }
};

// s[g * kBlock + j] += q[g][c, D) . k[j][c, D) for the head_dim tail (when head_dim is not a
// multiple of the full vector: only 8 lanes remain).
template <DType kT, int kG>
HWY_INLINE void tail_logit(const float* HWY_RESTRICT q, std::int64_t D, std::int64_t c0,
                           const std::byte* k, float* HWY_RESTRICT s) {
  const hn::CappedTag<float, 8> dh;
  for (std::int64_t c = c0; c < D; c += static_cast<std::int64_t>(hn::Lanes(dh))) {
    const auto x = load_f32<kT>(dh, k, static_cast<std::size_t>(c));
    for (int g = 0; g < kG; ++g) {
      s[g * kBlock] += hn::GetLane(hn::SumOfLanes(dh, hn::Mul(hn::LoadU(dh, q + g * D + c), x)));
    }
  }
}

// s[g * kBlock + j] = q[g] . k[j] for g < kG, j < n. Four tokens at a time: each q chunk loaded
// from L1 feeds four FMAs and the 4 x kG dot products are reduced together. The prefetch
// streams (if any) are issued along the way.
template <DType kT, int kG>
HWY_NOINLINE void block_logits(const float* HWY_RESTRICT q, std::int64_t D,
                               const BlockRows& rows, PrefetchStream* near, PrefetchStream* far,
                               float* HWY_RESTRICT s) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t d_main = D / N * N;
  const std::int64_t n = rows.n;
  constexpr int kTok = 4;
  // Prefetches are spread evenly over the block's token quads.
  const std::int64_t quads = std::max<std::int64_t>(1, n / kTok);
  const std::int64_t row_bytes = D * static_cast<std::int64_t>(sizeof(KVStorage<kT>));
  const std::int64_t near_step = near ? (near->count + quads - 1) / quads : 0;
  const std::int64_t far_step = far ? (far->count + quads - 1) / quads : 0;

  std::int64_t j = 0;
  for (; j + kTok <= n; j += kTok) {
    if (near) near->step(near_step);
    if (far) far->step(far_step);
    // Rows a few tokens ahead, from L2 into L1 just in time: with heads interleaved (NHD) one
    // head's rows sit 2 KiB apart and share a handful of L1 sets, so earlier fetches would
    // evict each other.
    for (std::int64_t t = j + kAhead; t < std::min(j + kAhead + kTok, n); ++t) {
      for (std::int64_t off = 0; off < row_bytes; off += kCacheLine) hwy::Prefetch(rows.k[t] + off);
    }
    V a[kTok][kG];
    for (int t = 0; t < kTok; ++t) {
      for (int g = 0; g < kG; ++g) a[t][g] = hn::Zero(df);
    }
    for (std::int64_t c = 0; c < d_main; c += N) {
      V x[kTok];
      for (int t = 0; t < kTok; ++t) x[t] = load_f32<kT>(df, rows.k[j + t], static_cast<std::size_t>(c));
      for (int g = 0; g < kG; ++g) {
        const V qv = hn::LoadU(df, q + g * D + c);
        for (int t = 0; t < kTok; ++t) a[t][g] = hn::MulAdd(qv, x[t], a[t][g]);
      }
    }
    for (int g = 0; g < kG; ++g) store_sums4(df, a[0][g], a[1][g], a[2][g], a[3][g], s + g * kBlock + j);
    if (d_main < D) {
      for (int t = 0; t < kTok; ++t) tail_logit<kT, kG>(q, D, d_main, rows.k[j + t], s + j + t);
    }
  }
  for (; j < n; ++j) {
    V a[kG];
    for (int g = 0; g < kG; ++g) a[g] = hn::Zero(df);
    for (std::int64_t c = 0; c < d_main; c += N) {
      const V x = load_f32<kT>(df, rows.k[j], static_cast<std::size_t>(c));
      for (int g = 0; g < kG; ++g) a[g] = hn::MulAdd(hn::LoadU(df, q + g * D + c), x, a[g]);
    }
    for (int g = 0; g < kG; ++g) s[g * kBlock + j] = hn::GetLane(hn::SumOfLanes(df, a[g]));
    if (d_main < D) tail_logit<kT, kG>(q, D, d_main, rows.k[j], s + j);
  }
  if (near) near->step(near->count);  // whatever the quads left (short blocks)
  if (far) far->step(far->count);
}

// acc[g][c, c + kC * Lanes(d)) += sum_j p[g * kBlock + j] * v[j][same] for g < kG: kC chunks
// of kG heads stay in registers across the block, kC * kG independent FMA chains.
template <DType kT, int kG, int kC, class D>
HWY_INLINE void accumulate_chunks(D d, float* HWY_RESTRICT acc, std::int64_t head_dim,
                                  std::int64_t c, const BlockRows& rows,
                                  const float* HWY_RESTRICT p, PrefetchStream* pf,
                                  std::int64_t pf_step) {
  const auto N = static_cast<std::int64_t>(hn::Lanes(d));
  hn::Vec<D> a[kC][kG];
  for (int k = 0; k < kC; ++k) {
    for (int g = 0; g < kG; ++g) a[k][g] = hn::LoadU(d, acc + g * head_dim + c + k * N);
  }
  const std::int64_t bytes = kC * N * static_cast<std::int64_t>(sizeof(KVStorage<kT>));
  for (std::int64_t j = 0; j < rows.n; ++j) {
    if (j + kAhead < rows.n) {
      const std::byte* ahead = rows.v[j + kAhead] + c * static_cast<std::int64_t>(sizeof(KVStorage<kT>));
      for (std::int64_t off = 0; off < bytes; off += kCacheLine) hwy::Prefetch(ahead + off);
    }
    hn::Vec<D> x[kC];
    for (int k = 0; k < kC; ++k) x[k] = load_f32<kT>(d, rows.v[j], static_cast<std::size_t>(c + k * N));
    for (int g = 0; g < kG; ++g) {
      const auto w = hn::Set(d, p[g * kBlock + j]);
      for (int k = 0; k < kC; ++k) a[k][g] = hn::MulAdd(w, x[k], a[k][g]);
    }
    if (pf && (j & 3) == 3) pf->step(pf_step);
  }
  for (int k = 0; k < kC; ++k) {
    for (int g = 0; g < kG; ++g) hn::StoreU(a[k][g], d, acc + g * head_dim + c + k * N);
  }
}

// acc[g] += sum_j p[g * kBlock + j] * v[j] for g < kG.
template <DType kT, int kG>
HWY_NOINLINE void block_accumulate(float* HWY_RESTRICT acc, std::int64_t D, const BlockRows& rows,
                                   const float* HWY_RESTRICT p, PrefetchStream* pf) {
  const hn::ScalableTag<float> df;
  const hn::CappedTag<float, 8> dh;
  constexpr int kC = kG >= 8 ? 1 : 8 / kG;  // chunks per pass: about 8 accumulators in flight
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t d_main = D / N * N;
  // The prefetch stream is spread over the passes of the widest loop.
  const std::int64_t passes = std::max<std::int64_t>(1, d_main / (kC * N));
  const std::int64_t quads = std::max<std::int64_t>(1, rows.n / 4);
  const std::int64_t pf_step = pf ? (pf->count + passes * quads - 1) / (passes * quads) : 0;
  std::int64_t c = 0;
  for (; c + kC * N <= d_main; c += kC * N) {
    accumulate_chunks<kT, kG, kC>(df, acc, D, c, rows, p, pf, pf_step);
  }
  for (; c < d_main; c += N) accumulate_chunks<kT, kG, 1>(df, acc, D, c, rows, p, nullptr, 0);
  for (; c < D; c += static_cast<std::int64_t>(hn::Lanes(dh))) {
    accumulate_chunks<kT, kG, 1>(dh, acc, D, c, rows, p, nullptr, 0);
  }
  if (pf) pf->step(pf->count);
}

// acc[g][d] += sum_j p[g * kBlock + j] vt[d * kBlock + j] for g < G, d < D, j < n: the block's V
// dim-major (gathered from a layout whose V pages are [dim][token], as vLLM's); vt holds zeros
// from n up to a whole vector, p's lanes there are masked off. Four dims at a time, reduced
// together.
HWY_NOINLINE void block_accumulate_dim_major(float* HWY_RESTRICT acc, std::int64_t G, std::int64_t D,
                                             const float* HWY_RESTRICT vt, std::int64_t n,
                                             const float* HWY_RESTRICT p) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t nv = (n + N - 1) / N * N;
  for (std::int64_t g = 0; g < G; ++g) {
    const float* pg = p + g * kBlock;
    float* ag = acc + g * D;
    for (std::int64_t d = 0; d < D; d += 4) {
      V a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
      const float* v0 = vt + d * kBlock;
      for (std::int64_t j = 0; j < nv; j += N) {
        const V w = hn::IfThenElseZero(hn::FirstN(df, static_cast<std::size_t>(n - j)), hn::Load(df, pg + j));
        a0 = hn::MulAdd(w, hn::Load(df, v0 + j), a0);
        a1 = hn::MulAdd(w, hn::Load(df, v0 + kBlock + j), a1);
        a2 = hn::MulAdd(w, hn::Load(df, v0 + 2 * kBlock + j), a2);
        a3 = hn::MulAdd(w, hn::Load(df, v0 + 3 * kBlock + j), a3);
      }
      HWY_ALIGN float t[4];
      store_sums4(df, a0, a1, a2, a3, t);
      for (int k = 0; k < 4; ++k) ag[d + k] += t[k];
    }
  }
}

// Soft-cap, ALiBi, then the online-softmax update of query head h for a block of n logits at key
// positions [pos0, pos0 + n); s[0, n) becomes the probabilities exp(s - m').
HWY_INLINE void softmax_update(const AttentionProblem& p, std::int64_t h, std::int64_t pos0,
                               std::int64_t query_pos, std::int64_t n, std::int64_t D,
                               float* HWY_RESTRICT s, float& m, float& l, float* HWY_RESTRICT acc) {
  const hn::ScalableTag<float> df;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  const float cap = p.variant.soft_cap;
  const float slope = p.variant.alibi_slopes ? p.variant.alibi_slopes[h] : 0.0f;
  const auto neg_inf = hn::Set(df, detail::kNegInf);
  auto vmax = neg_inf;
  for (std::int64_t i = 0; i < n; i += N) {
    auto x = hn::Load(df, s + i);
    if (cap > 0.0f) x = hn::Mul(hn::Set(df, cap), hn::Tanh(df, hn::Mul(x, hn::Set(df, 1.0f / cap))));
    if (slope != 0.0f) {
      const auto rel = hn::Iota(df, static_cast<float>(pos0 + i - query_pos));
      x = hn::MulAdd(hn::Set(df, slope), rel, x);
    }
    if (i + N > n) x = hn::IfThenElse(hn::FirstN(df, static_cast<std::size_t>(n - i)), x, neg_inf);
    vmax = hn::Max(vmax, x);
    hn::Store(x, df, s + i);
  }
  const float m_new = std::max(m, hn::GetLane(hn::MaxOfLanes(df, vmax)));
  if (m_new == detail::kNegInf) {  // nothing finite yet: the block contributes nothing
    std::fill_n(s, n, 0.0f);
    return;
  }
  const auto vm = hn::Set(df, m_new);
  auto vsum = hn::Zero(df);
  for (std::int64_t i = 0; i < n; i += N) {
    const auto e = exp_nonpositive(df, hn::Sub(hn::Load(df, s + i), vm));  // padding: exp(-inf) = 0
    vsum = hn::Add(vsum, e);
    hn::Store(e, df, s + i);
  }
  const float alpha = m == detail::kNegInf ? 0.0f : std::exp(m - m_new);
  if (alpha != 1.0f) {
    const auto va = hn::Set(df, alpha);
    const hn::CappedTag<float, 8> dh;
    std::int64_t d = 0;
    for (; d + N <= D; d += N) hn::StoreU(hn::Mul(hn::LoadU(df, acc + d), va), df, acc + d);
    for (; d < D; d += static_cast<std::int64_t>(hn::Lanes(dh))) {
      hn::StoreU(hn::Mul(hn::LoadU(dh, acc + d), hn::Set(dh, alpha)), dh, acc + d);
    }
  }
  l = l * alpha + hn::GetLane(hn::SumOfLanes(df, vsum));
  m = m_new;
}

// Everything the kernel needs about one dtype/layout combination. kDirect: rows are read in
// place (dim-contiguous layouts); otherwise gathered into f32 tiles.
template <DType kCacheT, bool kDirect>
struct DecodeKernel {
  static constexpr DType kRowT = kDirect ? kCacheT : DType::kF32;
  static constexpr auto kElem = static_cast<std::int64_t>(sizeof(KVStorage<kCacheT>));

  const AttentionProblem& p;
  std::int64_t G, D, heads;  // heads: KV heads per work item
  bool bf16 = false;         // the AVX512-BF16 micro-kernels (bf16 q/KV/out, direct rows)
  std::int64_t Dp = 0;       // their padded head dim (bf16_padded_dim)
  // Token-major units on f32 FMAs (decode_units-inl.h) where bf16 does not apply: direct rows
  // of a head_dim in whole dim-pair blocks, several heads per item (NHD).
  bool units = false;
  // The f32 units copy each unit's V rows head-major during its logits (UnitVCopy): worth it
  // when the KV streams from DRAM, ~8% of compute where it stays in cache.
  bool copy_v = false;
  // Token-major bf16 units on f32 FMAs instead of VDPBF16PS (bf16_decode_logits_heads_fma):
  // q and the accumulators in the units' pair order, f32 weights.
  bool fma = false;
  // With fma: the logits of whole 16-token units of evenly spaced rows on AMX tiles
  // (amx_decode_logits_unit; q as dim pairs in sc.q16), the rest on FMAs.
  bool amx = false;
  // vLLM's split layout (bf16) on AMX tiles in place of the f32 gather: see
  // attend_split_units().
  bool split_amx = false;
  // Gathered layouts whose V dims are strided (vLLM: V pages [dim][token]): V is gathered
  // dim-major into sc.v_tile [D][kBlock] and accumulated by block_accumulate_dim_major.
  bool v_dim_major() const { return !kDirect && p.kv.v.elem_stride != 1; }
  // Keys in token-major units (attend_units()): several heads per item on either kernel family
  // (NHD; HND too where the plan gives its items all heads, see HeadsTogetherImpl), and a single
  // head per item as well on the FMA units, whose AMX logits take a head's 16 rows of a page as
  // one tile (measured: ~30% less compute per (key, KV head) than attend_keys' VDPBF16PS blocks
  // on a core that issues those slowly).
  bool token_major() const { return (bf16 && fma) || ((bf16 || units) && heads > 1); }
  // q and the accumulators in load_dim_pair's pair order (f32 units over a bf16 cache).
  bool pair_order() const { return token_major() && !bf16 && kPairOrder<kCacheT>; }

  // The factor the FMA units' products of this cache's rows are short of (kE4m3RowScale).
  float fma_row_scale() const { return bf16 && fma && kCacheT == DType::kF8E4M3 ? kE4m3RowScale : 1.0f; }

  // Row pointers of head `kh` for keys [t0, t0 + n) of the item's sequence (page-table lookup
  // once per page). Gathered layouts are converted into the thread's f32 tiles here.
  void fill_rows(const detail::SeqPages& pages, std::int64_t kh, std::int64_t t0, std::int64_t n,
                 BlockRows& rows, Scratch& sc) const {
    const auto& kv = p.kv;
    const std::int64_t ps = kv.page_size;
    rows.n = n;
    for (std::int64_t j = 0; j < n;) {
      const std::int64_t t = t0 + j;
      const std::int64_t page = pages.page(t / ps);
      const std::int64_t off = t % ps;
      const std::int64_t cnt = std::min(ps - off, n - j);
      if constexpr (kDirect) {
        const std::byte* kb = kv.k.data + (page * kv.k.page_stride + kh * kv.k.head_stride +
                                           off * kv.k.token_stride) * kElem;
        const std::byte* vb = kv.v.data + (page * kv.v.page_stride + kh * kv.v.head_stride +
                                           off * kv.v.token_stride) * kElem;
        for (std::int64_t i = 0; i < cnt; ++i) {
          rows.k[j + i] = kb + i * kv.k.token_stride * kElem;
          rows.v[j + i] = vb + i * kv.v.token_stride * kElem;
        }
      } else {
        gather_rows_f32<kCacheT>(kv.k, page, kh, off, cnt, D, sc.k_tile.get() + j * D);
        if (v_dim_major()) {
          gather_dims_f32<kCacheT>(kv.v, page, kh, off, cnt, D, kBlock, sc.v_tile.get() + j);
        } else {
          gather_rows_f32<kCacheT>(kv.v, page, kh, off, cnt, D, sc.v_tile.get() + j * D);
        }
        for (std::int64_t i = 0; i < cnt; ++i) {
          rows.k[j + i] = reinterpret_cast<const std::byte*>(sc.k_tile.get() + (j + i) * D);
          rows.v[j + i] = reinterpret_cast<const std::byte*>(sc.v_tile.get() + (j + i) * D);
        }
      }
      j += cnt;
    }
    if (v_dim_major()) {  // zeros past n up to a whole vector: block_accumulate_dim_major reads them
      const auto N = static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<float>()));
      const std::int64_t nv = std::min(kBlock, (n + N - 1) / N * N);
      for (std::int64_t d = 0; d < D; ++d) std::fill(sc.v_tile.get() + d * kBlock + n, sc.v_tile.get() + d * kBlock + nv, 0.0f);
    }
  }

  // The same keys one KV head further on (direct layouts only).
  void shift_rows(const BlockRows& from, std::int64_t dh, BlockRows& to) const {
    const std::int64_t dk = dh * p.kv.k.head_stride * kElem, dv = dh * p.kv.v.head_stride * kElem;
    to.n = from.n;
    for (std::int64_t j = 0; j < from.n; ++j) {
      to.k[j] = from.k[j] + dk;
      to.v[j] = from.v[j] + dv;
    }
  }

  // One block of keys for local head hi (KV head kh): logits, online softmax, accumulation.
  // Streams: `near` is spread over the logits, `after` issued between logits and accumulation,
  // `far` split between both.
  void attend_block(Scratch& sc, std::int64_t hi, std::int64_t kh, const BlockRows& rows,
                    PrefetchStream* near, PrefetchStream* after, PrefetchStream* far,
                    std::int64_t t0, std::int64_t query_pos) const {
    float* s = sc.s.get();
    // Half of the far stream is issued during the logits, half during the accumulation.
    PrefetchStream far_logits, far_acc;
    if (far) {
      far_logits = far_acc = *far;
      far_logits.count = far->count / 2;
      far_acc.first += far_logits.count;
      far_acc.count -= far_logits.count;
    }
    if (bf16) {
      float* acc = sc.acc16.get() + hi * G * Dp;
      bf16_decode_logits(sc.q16.get() + hi * G * Dp, Dp, G, D, p.variant.scale, rows, near,
                         far ? &far_logits : nullptr, s);
      for (std::int64_t g = 0; g < G; ++g) {
        softmax_update(p, kh * G + g, t0, query_pos, rows.n, Dp, s + g * kBlock, sc.m[hi * G + g],
                       sc.l[hi * G + g], acc + g * Dp);
      }
      if (after) after->step(after->count);
      bf16_decode_accumulate(acc, G, D, rows, s, kBlock, sc.pairs.get(), far ? &far_acc : nullptr);
      return;
    }
    const float* q = sc.q.get() + hi * G * D;
    float* acc = sc.acc.get() + hi * G * D;
    bool first = true;
    for_group_tiles<kLogitTile>(G, [&]<int kG>(std::int64_t g0) {
      block_logits<kRowT, kG>(q + g0 * D, D, rows, first ? near : nullptr,
                              first && far ? &far_logits : nullptr, s + g0 * kBlock);
      first = false;
    });
    for (std::int64_t g = 0; g < G; ++g) {
      softmax_update(p, kh * G + g, t0, query_pos, rows.n, D, s + g * kBlock, sc.m[hi * G + g],
                     sc.l[hi * G + g], acc + g * D);
    }
    if (after) after->step(after->count);
    if (v_dim_major()) {
      block_accumulate_dim_major(acc, G, D, sc.v_tile.get(), rows.n, s);
      return;
    }
    first = true;
    for_group_tiles(G, [&]<int kG>(std::int64_t g0) {
      block_accumulate<kRowT, kG>(acc + g0 * D, D, rows, s + g0 * kBlock,
                                  first && far ? &far_acc : nullptr);
      first = false;
    });
  }

  // Attends the item's keys; leaves the unnormalised state in sc.acc / sc.m / sc.l.
  void attend(const DecodeWorkItem& it, Scratch& sc) const {
    const std::int64_t s = it.seq, h0 = it.kv_head;
    const auto& qo = p.qo;
    const auto q_elem = static_cast<std::int64_t>(dtype_size(qo.q_dtype));
    for (std::int64_t hi = 0; hi < heads; ++hi) {
      const std::int64_t kh = h0 + hi;
      const float q_scale = p.variant.scale * (is_fp8(kCacheT) ? p.kv.k_scale_of(kh) : 1.0f) * fma_row_scale();
      for (std::int64_t g = 0; g < G; ++g) {
        const std::byte* qrow =
            qo.q + (p.q_begin(s) * qo.q_token_stride + (kh * G + g) * qo.q_head_stride) * q_elem;
        // The AMX kernels' q: raw, as dim pairs, [head][dim pair][group].
        const auto store_q_pairs = [&] {
          auto* pairs = reinterpret_cast<std::uint32_t*>(sc.q16.get()) + hi * (D / 2) * G + g;
          std::uint32_t pair = 0;
          for (std::int64_t r = 0; r < D / 2; ++r) {
            std::memcpy(&pair, qrow + r * 4, sizeof(pair));
            pairs[r * G] = pair;
          }
        };
        if (split_amx) {
          store_q_pairs();
        } else if (bf16 && fma) {  // f32, scaled, in pair order
          float* qf = sc.q.get() + (hi * G + g) * D;
          load_scaled_row(qrow, qo.q_dtype, D, q_scale, qf);
          permute_dim_pairs(qf, D);
          if (amx) store_q_pairs();  // and raw (D == Dp)
        } else if (bf16) {  // raw bf16, zero padded; the scale is applied to the logits
          std::uint16_t* q16 = sc.q16.get() + (hi * G + g) * Dp;
          std::fill_n(q16, Dp, std::uint16_t{0});
          std::memcpy(q16, qrow, static_cast<std::size_t>(D) * sizeof(std::uint16_t));
        } else {
          float* qf = sc.q.get() + (hi * G + g) * D;
          load_scaled_row(qrow, qo.q_dtype, D, q_scale, qf);
          if (pair_order()) permute_dim_pairs(qf, D);
        }
        sc.m[hi * G + g] = detail::kNegInf;
        sc.l[hi * G + g] = 0.0f;
      }
    }
    std::fill_n(sc.acc.get(), heads * G * D, 0.0f);
    if (bf16) std::fill_n(sc.acc16.get(), heads * G * Dp, 0.0f);
    if (split_amx) std::fill_n(sc.acc16.get(), heads * G * D, 0.0f);
    if (it.end > it.begin) {
      if constexpr (kDirect) {
        if (token_major()) attend_units(it, sc);
        else attend_keys(it, sc);
      } else if (split_amx) {
        attend_split_units(it, sc);
      } else {
        attend_keys(it, sc);
      }
    }
    if (split_amx) {  // O^T [D][heads * G] (sc.acc16) to [heads * G][D]
      const std::int64_t HG = heads * G;
      for (std::int64_t d = 0; d < D; ++d) {
        for (std::int64_t i = 0; i < HG; ++i) sc.acc[i * D + d] = sc.acc16[d * HG + i];
      }
    }
    if (bf16 && fma) {  // Dp == D here
      const float row_scale = fma_row_scale();
      std::transform(sc.acc16.get(), sc.acc16.get() + heads * G * D, sc.acc.get(), [row_scale](float x) { return x * row_scale; });
      for (std::int64_t i = 0; i < heads * G; ++i) unpermute_dim_pairs(sc.acc.get() + i * D, D);
    } else if (bf16) {
      for (std::int64_t i = 0; i < heads * G; ++i) {
        bf16_unpermute_acc(sc.acc16.get() + i * Dp, D, sc.acc.get() + i * D);
      }
    }
    if (pair_order()) {
      for (std::int64_t i = 0; i < heads * G; ++i) unpermute_dim_pairs(sc.acc.get() + i * D, D);
    }
  }

  // Token-major order (NHD: a token's K row holds all the item's heads, likewise V). Keys
  // go in units of up to kUnit consecutive tokens. The logits of a unit are computed for all
  // heads a few token rows at a time (whole rows in address order: a quad on the bf16 dot
  // products, one row on f32 FMAs) and stored token-major, [token][head * G + g], so the online
  // softmax of all query heads runs lane-parallel (no horizontal reductions); the p.v runs per
  // head over the unit's V rows (accumulators loaded and stored once per (unit, head); bf16
  // pairs the weights first; with copy_v the f32 units read V from the head-major copy that
  // the logits made of the unit's V rows, in address order). The next unit's K and V rows are
  // prefetched, spread over the current unit's work; on the bf16 path each quad's K rows and
  // each head's V rows are also pulled into L1 just before use.
  void attend_units(const DecodeWorkItem& it, Scratch& sc) const {
    const detail::SeqPages pages = p.pages_of(it.seq);
    const std::int64_t query_pos = decode_key_range(p, it.seq).query_pos;
    const std::int64_t kh_bytes = p.kv.k.head_stride * kElem, vh_bytes = p.kv.v.head_stride * kElem;
    // The just-in-time span of a token: its rows of all heads where they lie within the token's
    // row (NHD); else (HND) its first head's row only.
    const bool token_rows = p.kv.k.head_stride < p.kv.k.token_stride && p.kv.v.head_stride < p.kv.v.token_stride;
    const std::int64_t span = token_rows ? (heads - 1) * std::max(kh_bytes, vh_bytes) + D * kElem : D * kElem;
    const std::int64_t HG = heads * G, row = unit_row(HG, bf16);
    float* s = sc.s.get();
    auto* w = reinterpret_cast<std::uint32_t*>(sc.pairs.get());
    std::fill_n(sc.m.get() + HG, row - HG, detail::kNegInf);
    std::fill_n(sc.l.get() + HG, row - HG, 0.0f);
    // Prefetch distance: one unit (two measured no better; see docs/perf-notes.md).
    constexpr int kRing = 2, dist = 1;
    BlockRows rows[kRing], head_rows;
    const std::int64_t num_units = (it.end - it.begin + kUnit - 1) / kUnit;
    auto fill_unit = [&](std::int64_t u) {
      const std::int64_t t = it.begin + u * kUnit;
      fill_rows(pages, it.kv_head, t, std::min(kUnit, it.end - t), rows[u % kRing], sc);
    };
    for (std::int64_t u = 0; u < std::min<std::int64_t>(dist, num_units); ++u) fill_unit(u);
    const std::byte* next_k[kUnit + 1];
    const std::byte* next_v[kUnit + 1];
    const std::byte* pf_v[kUnit + 1];
    for (std::int64_t u = 0; u < num_units; ++u) {
      const std::int64_t t0 = it.begin + u * kUnit;
      const BlockRows& r = rows[u % kRing];
      const std::int64_t n = r.n;
      // The unit `dist` ahead: its rows mirror the current access pattern, so each group of
      // token rows (a quad on bf16, a pair on the f32 units) and head of the logits prefetches
      // the same rows and head of its K, and the p.v of each head the same head's V rows (bf16:
      // a few chunks per key pair; f32 units: a few rows per dim block). Clamped row lists, no
      // branches.
      const bool ahead = u + dist < num_units;
      if (ahead) {
        fill_unit(u + dist);
        const BlockRows& nx = rows[(u + dist) % kRing];
        for (std::int64_t j = 0; j <= kUnit; ++j) {
          next_k[j] = nx.k[std::min(j, nx.n - 1)];
          next_v[j] = nx.v[std::min(j, nx.n - 1)];
        }
      }
      // Logits. bf16: each quad's K rows pulled into L1 a quad ahead, then head 0's V rows into
      // L1 (and each next head's before its p.v); the f32 units leave the current unit's rows to
      // the next-unit prefetches and the hardware (the just-in-time ones measured 2% slower).
      float logit_scale = 1.0f;  // the AMX logits come unscaled
      if (bf16 && fma && amx && evenly_spaced(r.k, n)) {
        amx_decode_logits_unit(reinterpret_cast<const std::uint32_t*>(sc.q16.get()), heads, G, D, r.k[0],
                               r.k[1] - r.k[0], kh_bytes, ahead ? next_k : nullptr, s, row);
        logit_scale = p.variant.scale;
      } else if (bf16 && fma) {
        bf16_decode_logits_heads_fma(sc.q.get(), D, heads, G, D, r, kh_bytes, ahead ? next_k : nullptr, s, row, span,
                                     kCacheT);
      } else if (bf16) {
        bf16_decode_logits_heads(sc.q16.get(), Dp, heads, G, D, p.variant.scale, r, kh_bytes,
                                 ahead ? next_k : nullptr, s, row, span);
      } else {
        unit_logits<kRowT>(sc.q.get(), heads, G, D, r, kh_bytes, ahead ? next_k : nullptr, s, row,
                           copy_v ? UnitVCopy{vh_bytes, kUnit, sc.v_unit.get()} : UnitVCopy{});
      }
      if (bf16) {  // head 0's V rows into L1 (each next head's follow before its p.v)
        for (std::int64_t j = 0; j < n; ++j) prefetch_span4(r.v[j], D * kElem);
      }
      softmax_unit(it.kv_head * G, HG, t0, query_pos, n, row, s, sc, logit_scale);
      if (bf16 && !fma) bf16_pack_pairs(s, row, n, row, w);
      head_rows.n = n;
      for (std::int64_t hi = 0; hi < heads; ++hi) {
        for (std::int64_t j = 0; j < n; ++j) {
          head_rows.v[j] = copy_v ? sc.v_unit.get() + (hi * kUnit + j) * D * kElem : r.v[j] + hi * vh_bytes;
        }
        if (bf16 && hi + 1 < heads) {  // the next head's V rows, into L1 just before use
          for (std::int64_t j = 0; j < n; ++j) prefetch_span4(head_rows.v[j] + vh_bytes, D * kElem);
        }
        if (ahead) {
          for (std::int64_t j = 0; j <= kUnit; ++j) pf_v[j] = next_v[j] + hi * vh_bytes;
        }
        if (bf16 && fma) {
          bf16_decode_accumulate_fma(sc.acc16.get() + hi * G * Dp, G, D, head_rows, s + hi * G, 1, row,
                                     ahead ? pf_v : nullptr, kCacheT);
        } else if (bf16) {
          bf16_decode_accumulate_pairs(sc.acc16.get() + hi * G * Dp, G, D, head_rows, w + hi * G, 1,
                                       row, nullptr, ahead ? pf_v : nullptr);
        } else {
          unit_accumulate<kRowT>(sc.acc.get() + hi * G * D, G, D, head_rows.v, n, s + hi * G, row,
                                 ahead ? AheadSpans{pf_v, n, D * kElem} : AheadSpans{});
        }
      }
    }
  }

  // vLLM's split layout (K [dim / 8][token][8], V [dim][token] per page and head) on AMX tiles:
  // units of 16 tokens aligned to multiples of 16, all the item's KV heads in each (as the plan
  // gives them: a unit is then a whole page of every head). A head's unit is read in place where
  // it lies inside one page (page sizes that are multiples of 16) and otherwise gathered, zero
  // padded, into the same form. The logits go token-major into s as on the other units and take
  // the same online softmax; the weights, rounded to bf16 and paired by tokens, multiply V into
  // O^T [D][heads * G] (sc.acc16). The unit two ahead is prefetched along (prefetcht2).
  void attend_split_units(const DecodeWorkItem& it, Scratch& sc) const {
    const detail::SeqPages pages = p.pages_of(it.seq);
    const std::int64_t query_pos = decode_key_range(p, it.seq).query_pos;
    const auto& k = p.kv.k;
    const auto& v = p.kv.v;
    const std::int64_t HG = heads * G, ps = p.kv.page_size, row = unit_row(HG, true);
    float* s = sc.s.get();
    float* acc_t = sc.acc16.get();
    auto* w_pairs = reinterpret_cast<std::uint32_t*>(sc.pairs.get());
    const auto* q_pairs = reinterpret_cast<const std::uint32_t*>(sc.q16.get());
    std::fill_n(sc.m.get() + HG, row - HG, detail::kNegInf);
    std::fill_n(sc.l.get() + HG, row - HG, 0.0f);
    // The item's first head's unit of n tokens from t read in place, if it lies inside one page
    // (else k is null); head h's is head_unit(that, h).
    const auto in_place = [&](std::int64_t t, std::int64_t n) {
      const std::int64_t off = t % ps;
      if (n != kUnit || off + kUnit > ps) return SplitUnit{};
      const std::int64_t page = pages.page(t / ps);
      return SplitUnit{k.data + k.offset(page, it.kv_head, off, 0) * kElem,
                       v.data + v.offset(page, it.kv_head, off, 0) * kElem, k.chunk_stride * kElem,
                       v.elem_stride * kElem};
    };
    const auto head_unit = [&](const SplitUnit& u, std::int64_t h) {
      if (u.k == nullptr) return u;
      return SplitUnit{u.k + h * k.head_stride * kElem, u.v + h * v.head_stride * kElem, u.k_block_bytes,
                       u.v_dim_bytes};
    };
    // The same gathered, K or V, into the thread's copy (zero past n).
    const auto gather_k = [&](std::int64_t t, std::int64_t n, std::int64_t h) {
      std::uint16_t* kg = sc.k_split.get();
      std::fill_n(kg, D * kUnit, std::uint16_t{0});
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t page = pages.page((t + j) / ps), off = (t + j) % ps;
        for (std::int64_t i = 0; i < D / 8; ++i) {
          std::memcpy(kg + (i * kUnit + j) * 8, k.data + k.offset(page, it.kv_head + h, off, i * 8) * kElem, 16);
        }
      }
      return SplitUnit{reinterpret_cast<const std::byte*>(kg), nullptr, kUnit * 16, 0};
    };
    const auto gather_v = [&](std::int64_t t, std::int64_t n, std::int64_t h) {
      std::uint16_t* vg = sc.v_split.get();
      std::fill_n(vg, D * kUnit, std::uint16_t{0});
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t page = pages.page((t + j) / ps), off = (t + j) % ps;
        for (std::int64_t d = 0; d < D; ++d) {
          std::memcpy(vg + d * kUnit + j, v.data + v.offset(page, it.kv_head + h, off, d) * kElem, 2);
        }
      }
      return SplitUnit{nullptr, reinterpret_cast<const std::byte*>(vg), 0, kUnit * 2};
    };
    const auto unit_end = [&](std::int64_t t) { return std::min(it.end, (t / kUnit + 1) * kUnit); };
    for (std::int64_t t = it.begin; t < it.end;) {
      const std::int64_t t1 = unit_end(t), n = t1 - t;
      const std::int64_t t2 = unit_end(t1), ta = t2 < it.end ? t2 : it.end;
      const std::int64_t na = ta < it.end ? unit_end(ta) - ta : 0;
      const SplitUnit here = in_place(t, n), later = na > 0 ? in_place(ta, na) : SplitUnit{};
      const bool direct = here.k != nullptr;
      for (std::int64_t h = 0; h < heads; ++h) {
        const SplitUnit unit = direct ? head_unit(here, h) : gather_k(t, n, h);
        const SplitUnit ahead = head_unit(later, h);
        amx_split_logits_unit(q_pairs + h * (D / 2) * G, G, D, unit, ahead, s + h * G, row);
      }
      softmax_unit(it.kv_head * G, HG, t, query_pos, n, row, s, sc, p.variant.scale, acc_t);
      for (std::int64_t h = 0; h < heads; ++h) {
        // Token pairs of bf16 weights, zero past n.
        for (std::int64_t r = 0; r < kUnit / 2; ++r) {
          for (std::int64_t g = 0; g < G; ++g) {
            const std::uint32_t lo = 2 * r < n ? float_to_bf16(s[2 * r * row + h * G + g]) : 0u;
            const std::uint32_t hi = 2 * r + 1 < n ? float_to_bf16(s[(2 * r + 1) * row + h * G + g]) : 0u;
            w_pairs[r * G + g] = lo | hi << 16;
          }
        }
        const SplitUnit unit = direct ? head_unit(here, h) : gather_v(t, n, h);
        const SplitUnit ahead = head_unit(later, h);
        amx_split_accumulate_unit(acc_t + h * G, HG, G, D, unit, w_pairs, ahead);
      }
      t = t1;
    }
  }

  // Online-softmax update of the HG query heads (from qh0) for a unit of n logits, stored
  // token-major (s[j * row + i]), lane-parallel over the heads: soft-cap and ALiBi, new max,
  // s becomes exp(s - m'), l and the accumulators (sc.acc16 rows for bf16, else sc.acc) rescaled
  // by exp(m - m').
  void softmax_unit(std::int64_t qh0, std::int64_t HG, std::int64_t pos0, std::int64_t query_pos,
                    std::int64_t n, std::int64_t row, float* HWY_RESTRICT s, Scratch& sc,
                    float logit_scale, float* acc_t = nullptr) const {
    const hn::ScalableTag<float> df;
    const auto N = static_cast<std::int64_t>(hn::Lanes(df));
    const float cap = p.variant.soft_cap;
    const float* slopes = p.variant.alibi_slopes;
    const auto neg_inf = hn::Set(df, detail::kNegInf);
    float* HWY_RESTRICT alpha = sc.alpha.get();
    for (std::int64_t i0 = 0; i0 < row; i0 += N) {
      auto slope = hn::Zero(df);
      if (slopes) {
        slope = hn::MaskedLoad(hn::FirstN(df, static_cast<std::size_t>(std::clamp<std::int64_t>(HG - i0, 0, N))),
                               df, slopes + qh0 + std::min(i0, HG - 1));
      }
      auto mx = neg_inf;
      for (std::int64_t j = 0; j < n; ++j) {
        auto x = hn::Load(df, s + j * row + i0);
        if (logit_scale != 1.0f) x = hn::Mul(x, hn::Set(df, logit_scale));
        if (cap > 0.0f) x = hn::Mul(hn::Set(df, cap), hn::Tanh(df, hn::Mul(x, hn::Set(df, 1.0f / cap))));
        if (slopes) x = hn::MulAdd(slope, hn::Set(df, static_cast<float>(pos0 + j - query_pos)), x);
        hn::Store(x, df, s + j * row + i0);
        mx = hn::Max(mx, x);
      }
      const auto m_old = hn::Load(df, sc.m.get() + i0);
      const auto m_new = hn::Max(m_old, mx);
      const auto none = hn::Eq(m_new, neg_inf);  // nothing finite yet: contributes nothing
      auto sum = hn::Zero(df);
      for (std::int64_t j = 0; j < n; ++j) {
        const auto e = hn::IfThenZeroElse(none, exp_nonpositive(df, hn::Sub(hn::Load(df, s + j * row + i0), m_new)));
        sum = hn::Add(sum, e);
        hn::Store(e, df, s + j * row + i0);
      }
      const auto a = hn::IfThenZeroElse(hn::Eq(m_old, neg_inf), exp_nonpositive(df, hn::Sub(m_old, m_new)));
      // Lanes with nothing finite keep their state (alpha 1).
      const auto a_keep = hn::IfThenElse(none, hn::Set(df, 1.0f), a);
      hn::Store(hn::MulAdd(hn::Load(df, sc.l.get() + i0), a_keep, sum), df, sc.l.get() + i0);
      hn::Store(m_new, df, sc.m.get() + i0);
      hn::Store(a_keep, df, alpha + i0);
    }
    if (acc_t != nullptr) {  // O^T [D][HG] (split-layout units)
      for (std::int64_t i = 0; i < HG; ++i) {
        if (alpha[i] == 1.0f) continue;
        for (std::int64_t d = 0; d < D; ++d) acc_t[d * HG + i] *= alpha[i];
      }
      return;
    }
    const std::int64_t acc_row = bf16 ? Dp : D;  // D: whole dim-pair blocks (units)
    float* acc_base = bf16 ? sc.acc16.get() : sc.acc.get();
    for (std::int64_t i = 0; i < HG; ++i) {
      if (alpha[i] == 1.0f) continue;
      float* acc = acc_base + i * acc_row;
      const auto va = hn::Set(df, alpha[i]);
      for (std::int64_t d = 0; d < acc_row; d += N) hn::Store(hn::Mul(hn::Load(df, acc + d), va), df, acc + d);
    }
  }

  // The key blocks of attend(), for a non-empty key range.
  void attend_keys(const DecodeWorkItem& it, Scratch& sc) const {
    const std::int64_t s = it.seq, h0 = it.kv_head;
    const detail::SeqPages pages = p.pages_of(s);
    const std::int64_t query_pos = decode_key_range(p, s).query_pos;
    if constexpr (kDirect) {
      // Rows of head h0 for this block and the next; other heads are a fixed offset away.
      // While a (block, head) unit is computed, a "far" prefetch stream fetches a slice of the
      // next block's token rows across all the item's heads (contiguous spans in address
      // order, so DRAM streams whole pages); "near" ones pull this block's rows into L1 shortly
      // before use (this head's V, then the next head's K).
      const std::int64_t span = (heads - 1) * p.kv.k.head_stride * kElem + D * kElem;
      const bool v_span_ok = (heads - 1) * p.kv.v.head_stride == (heads - 1) * p.kv.k.head_stride;
      BlockRows base[2], unit[2], near_v, near_k;  // near_*: only .k is used
      int cur = 0;
      fill_rows(pages, h0, it.begin, std::min(kBlock, it.end - it.begin), base[cur], sc);
      for (std::int64_t t0 = it.begin; t0 < it.end; t0 += kBlock) {
        const std::int64_t n = base[cur].n;
        const std::int64_t n_next = std::min(kBlock, it.end - t0 - n);
        if (n_next > 0) fill_rows(pages, h0, t0 + n, n_next, base[1 - cur], sc);
        int u = 0;
        unit[u] = base[cur];
        for (std::int64_t hi = 0; hi < heads; ++hi) {
          PrefetchStream far;
          if (n_next > 0) {
            const std::int64_t lo = n_next * hi / heads, up = n_next * (hi + 1) / heads;
            far = {&base[1 - cur], lo, up - lo, v_span_ok ? span : D * kElem};
          }
          // Pulled into L1 just before use: this head's V rows during its logits, the next
          // head's K rows right after them. One head's NHD rows share a few L1 sets, so rows
          // fetched a whole head earlier (the next head's V) are evicted before they are read.
          if (hi + 1 < heads) shift_rows(base[cur], hi + 1, unit[1 - u]);
          const BlockRows& next = hi + 1 < heads ? unit[1 - u] : unit[u];
          near_v.n = near_k.n = n;
          std::copy_n(unit[u].v, n, near_v.k);
          std::copy_n(next.k, n, near_k.k);
          PrefetchStream near{&near_v, 0, n, D * kElem, false};
          PrefetchStream next_k{&near_k, 0, n, D * kElem, false};
          attend_block(sc, hi, h0 + hi, unit[u], &near, &next_k, n_next > 0 ? &far : nullptr,
                       t0, query_pos);
          u = 1 - u;
        }
        cur = 1 - cur;
      }
    } else {
      BlockRows rows;
      for (std::int64_t t0 = it.begin; t0 < it.end; t0 += kBlock) {
        const std::int64_t n = std::min(kBlock, it.end - t0);
        for (std::int64_t hi = 0; hi < heads; ++hi) {
          fill_rows(pages, h0 + hi, t0, n, rows, sc);
          attend_block(sc, hi, h0 + hi, rows, nullptr, nullptr, nullptr, t0, query_pos);
        }
      }
    }
  }

  void run(const DecodePlan& plan, float* part, int num_threads) const {
    const auto num_items = static_cast<std::int64_t>(plan.items.size());
    const auto num_merges = static_cast<std::int64_t>(plan.merges.size());
#pragma omp parallel num_threads(num_threads)
    {
      Scratch sc(heads, G, D, !kDirect, bf16 || split_amx, token_major() || split_amx, copy_v, D * kElem);
      if (split_amx) sc.allocate_split_units(D);
      if (amx) amx_decode_tiles_begin(G);
      if (split_amx) amx_split_tiles_begin(G);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t i = 0; i < num_items; ++i) {
        const DecodeWorkItem& it = plan.items[static_cast<std::size_t>(i)];
        attend(it, sc);
        const DecodeState st{heads, G, D, sc.acc.get(), sc.m.get(), sc.l.get()};
        if (it.slot < 0) decode_write_output(p, it, st);
        else decode_write_partial(it.slot, st, part);
      }
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < num_merges; ++i) {
        decode_merge(p, plan.merges[static_cast<std::size_t>(i)], heads, part, sc.acc.get());
      }
      if (amx || split_amx) amx_tiles_end();
    }
  }
};

// vLLM's split layout on AMX tiles (attend_split_units): bf16 q, cache and output (the weights
// are rounded to bf16), a group that fits a tile's 16 columns, 8-dim K
// chunks of 16-byte token rows, V rows of contiguous tokens; where the process has AMX
// (decode_bf16_amx_logits, so PAGEDATTN_CPU_DECODE_AMX=0 keeps the f32 gather).
bool split_amx_applies(const AttentionProblem& p) {
  const auto& k = p.kv.k;
  const auto& v = p.kv.v;
  return p.kv.dtype == DType::kBF16 && p.qo.q_dtype == DType::kBF16 && p.qo.out_dtype == DType::kBF16 &&
         p.group_size() <= 16 && p.head_dim % 16 == 0 && k.chunk_len == 8 &&
         k.elem_stride == 1 && k.token_stride == 8 && v.token_stride == 1 && decode_bf16_amx_logits();
}

// The bf16 kernels' condition: bf16 q, cache and output (their VDPBF16PS variant rounds the
// weights to bf16: inside the bf16 output tolerance only), dim-contiguous rows.
bool bf16_kernels_apply(const AttentionProblem& p) {
  return p.kv.dtype == DType::kBF16 && p.qo.q_dtype == DType::kBF16 && p.qo.out_dtype == DType::kBF16 &&
         p.kv.k.dim_contiguous(p.head_dim) && p.kv.v.dim_contiguous(p.head_dim) && bf16_dot_supported();
}

// Whether the FMA units of decode_bf16.h take this problem's rows, whatever their dtype:
// dim-contiguous, whole 32-dim pair blocks, on a core that issues f32 FMAs well ahead of
// VDPBF16PS (decode_bf16_on_fmas).
bool fma_units_take_rows(const AttentionProblem& p) {
  return p.kv.k.dim_contiguous(p.head_dim) && p.kv.v.dim_contiguous(p.head_dim) && bf16_dot_supported() &&
         p.head_dim % 32 == 0 && dim_pair_block() == 32 && decode_bf16_on_fmas();
}

// bf16 caches on the FMA units.
bool bf16_fma_units_apply(const AttentionProblem& p) { return bf16_kernels_apply(p) && fma_units_take_rows(p); }

// f16 and fp8 caches on the same FMA units (the chunks converted into their pair order; fp8's
// scales as on the other kernels: k_scale in q, v_scale on the output), any q and output dtype
// (the weights stay f32). PAGEDATTN_CPU_DECODE_WIDE_FMA=0 keeps them on the f32 units.
bool wide_fma_units_apply(const AttentionProblem& p) {
  static const bool switched_off = detail::env_switched_off("PAGEDATTN_CPU_DECODE_WIDE_FMA");  // read once
  return (p.kv.dtype == DType::kF16 || is_fp8(p.kv.dtype)) && fma_units_take_rows(p) && !switched_off;
}

// Whether the plan should give each item all KV heads of its keys whatever the layout: the FMA
// units, whose per-head loops take any head stride (HND: a unit is then a whole page, each
// head's 16 rows one contiguous block), and the split-layout AMX units.
bool HeadsTogetherImpl(const AttentionProblem& p) {
  return bf16_fma_units_apply(p) || wide_fma_units_apply(p) || split_amx_applies(p);
}

template <DType kCacheT>
void run_dtype(const AttentionProblem& p, const DecodePlan& plan, float* part, int threads) {
  const bool direct = p.kv.k.dim_contiguous(p.head_dim) && p.kv.v.dim_contiguous(p.head_dim);
  const std::int64_t G = p.group_size(), D = p.head_dim, H = plan.heads_per_item;
  if constexpr (kCacheT == DType::kBF16) {
    if (bf16_kernels_apply(p)) {
      const bool fma = bf16_fma_units_apply(p);
      // and their logits on AMX tiles where the process has them (decode_bf16_amx_logits).
      const bool amx = fma && G <= 16 && decode_bf16_amx_logits();
      DecodeKernel<kCacheT, true>{p, G, D, H, true, bf16_padded_dim(D), false, false, fma, amx}.run(plan, part, threads);
      return;
    }
  }
  if constexpr (kCacheT == DType::kF16 || is_fp8(kCacheT)) {
    if (wide_fma_units_apply(p)) {
      DecodeKernel<kCacheT, true>{p, G, D, H, true, bf16_padded_dim(D), false, false, true, false}.run(plan, part, threads);
      return;
    }
  }
  if (direct) {
    // PAGEDATTN_CPU_DECODE_UNITS=0 keeps the key blocks of attend_keys instead.
    // Several heads per item (NHD) only: a single head's units (HND) measured slower than its
    // key blocks from DRAM (docs/perf-notes.md).
    const bool units = H > 1 && units_support_head_dim(D) && !detail::env_switched_off("PAGEDATTN_CPU_DECODE_UNITS");
    // PAGEDATTN_CPU_DECODE_COPY_V=0/1 forces the V copy off/on (tests take both paths); the
    // call's KV bytes are counted only where the units run.
    const auto copy_v = [&] {
      if (!units) return false;
      std::int64_t tokens = 0;
      for (const DecodeWorkItem& it : plan.items) tokens += it.end - it.begin;
      const std::int64_t kv_bytes = 2 * tokens * H * D * static_cast<std::int64_t>(sizeof(KVStorage<kCacheT>));
      return detail::env_switch("PAGEDATTN_CPU_DECODE_COPY_V", kv_bytes > last_level_cache_bytes());
    }();
    DecodeKernel<kCacheT, true>{p, G, D, H, false, 0, units, copy_v}.run(plan, part, threads);
  } else {
    if constexpr (kCacheT == DType::kBF16) {
      if (split_amx_applies(p)) {
        DecodeKernel<kCacheT, false> kernel{p, G, D, H};
        kernel.split_amx = true;
        kernel.run(plan, part, threads);
        return;
      }
    }
    DecodeKernel<kCacheT, false>{p, G, D, H}.run(plan, part, threads);
  }
}

}  // namespace

void DecodeImpl(const AttentionProblem& p, const DecodePlan& plan, float* part, int threads) {
  switch (p.kv.dtype) {
    case DType::kF32: return run_dtype<DType::kF32>(p, plan, part, threads);
    case DType::kF16: return run_dtype<DType::kF16>(p, plan, part, threads);
    case DType::kBF16: return run_dtype<DType::kBF16>(p, plan, part, threads);
    case DType::kF8E4M3: return run_dtype<DType::kF8E4M3>(p, plan, part, threads);
    case DType::kF8E5M2: return run_dtype<DType::kF8E5M2>(p, plan, part, threads);
    default: return;  // validation admits only the float dtypes above
  }
}

}  // namespace pagedattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <vector>

namespace pagedattn::cpu {
HWY_EXPORT(DecodeImpl);
HWY_EXPORT(HeadsTogetherImpl);

void decode(const detail::AttentionProblem& p, const DecodeOptions& options, int num_threads) {
  const int threads = resolve_num_threads(num_threads);
  const DecodePlan plan = plan_decode(p, options, threads, HWY_DYNAMIC_DISPATCH(HeadsTogetherImpl)(p));
  const std::int64_t floats = plan.num_slots * plan.slot_floats(p.group_size(), p.head_dim);
  std::vector<float> part(static_cast<std::size_t>(floats));
  HWY_DYNAMIC_DISPATCH(DecodeImpl)(p, plan, part.data(), threads);
}
}  // namespace pagedattn::cpu
#endif  // HWY_ONCE
