// Internal, per SIMD target: horizontal sums of f32 vectors for the CPU decode's logits.
//
// Include this after <hwy/foreach_target.h> in a translation unit that compiles once per target
// (HWY_TARGET_INCLUDE); toggle guard as kv_rows.h.
//
//   store_sums4(d, a, b, c, e, out)   out[0, 4) = the lane sums of a, b, c and e
#if defined(PAGEDATTN_CPU_LANE_SUMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PAGEDATTN_CPU_LANE_SUMS_INL_H_
#undef PAGEDATTN_CPU_LANE_SUMS_INL_H_
#else
#define PAGEDATTN_CPU_LANE_SUMS_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace pagedattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// Adds the 128-bit blocks of v and stores the 4 floats.
template <class D>
HWY_INLINE void store_block_sum(D d, hn::Vec<D> v, float* HWY_RESTRICT out) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    hn::StoreU(v, d, out);
  } else {
    const hn::Half<D> dh;
    store_block_sum(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)), out);
  }
}
#endif

// out[0, 4) = the lane sums of a, b, c, e (a transposing reduction: ~13 ops instead of 4 full
// horizontal sums).
template <class D, class V = hn::Vec<D>>
HWY_INLINE void store_sums4(D d, V a, V b, V c, V e, float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  out[0] = hn::GetLane(a), out[1] = hn::GetLane(b), out[2] = hn::GetLane(c), out[3] = hn::GetLane(e);
#else
  const hn::RepartitionToWide<D> dw;  // moves pairs of floats as one f64 lane
  // Per 128-bit block: ab = [a0+a2, b0+b2, a1+a3, b1+b3], ce likewise.
  const V ab = hn::Add(hn::InterleaveLower(a, b), hn::InterleaveUpper(d, a, b));
  const V ce = hn::Add(hn::InterleaveLower(c, e), hn::InterleaveUpper(d, c, e));
  // Per block: [a, b, c, e] partial sums.
  const V abce = hn::Add(hn::BitCast(d, hn::InterleaveLower(hn::BitCast(dw, ab), hn::BitCast(dw, ce))),
                         hn::BitCast(d, hn::InterleaveUpper(dw, hn::BitCast(dw, ab), hn::BitCast(dw, ce))));
  store_block_sum(d, abce, out);
#endif
}

}  // namespace pagedattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
