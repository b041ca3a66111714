// Internal, per SIMD target: exp(x) for the online softmax's arguments, which are never positive
// (a logit minus the running maximum, or the old maximum minus the new one).
//
// Include this after <hwy/foreach_target.h> in a translation unit that compiles once per target
// (HWY_TARGET_INCLUDE); toggle guard as kv_rows.h.
//
//   exp_nonpositive(d, x)   2^n * p(f) with x log2(e) = n + f, |f| <= 1/2, p the degree-6 Taylor
//                           polynomial of 2^f (relative error < 2e-7); results below 2^-126 are
//                           0, -inf gives 0 and NaN stays NaN. Positive x is right too while
//                           n <= 127 (x < 88; the prefill's softmax passes up to 8), but nothing
//                           guards that end. About half the instructions of hn::Exp, which covers
//                           every argument.
#if defined(PAGEDATTN_CPU_EXP_NONPOSITIVE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PAGEDATTN_CPU_EXP_NONPOSITIVE_INL_H_
#undef PAGEDATTN_CPU_EXP_NONPOSITIVE_INL_H_
#else
#define PAGEDATTN_CPU_EXP_NONPOSITIVE_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace pagedattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class DF, class V = hn::Vec<DF>>
HWY_INLINE V exp_nonpositive(DF df, V x) {
  const hn::RebindToSigned<DF> di;
  const V x2 = hn::Mul(x, hn::Set(df, 1.4426950408889634f));
  const V n = hn::Round(x2);
  const V f = hn::Sub(x2, n);
  V p = hn::Set(df, 1.5403530393381608e-4f);
  p = hn::MulAdd(p, f, hn::Set(df, 1.3333558146428443e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 9.618129107628477e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 5.550410866482158e-2f));
  p = hn::MulAdd(p, f, hn::Set(df, 0.2402265069591007f));
  p = hn::MulAdd(p, f, hn::Set(df, 0.6931471805599453f));
  p = hn::MulAdd(p, f, hn::Set(df, 1.0f));
  // 2^n as a float's exponent field; n >= -126 wherever the result is kept.
  const auto e = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::IfThenZeroElse(hn::Lt(x2, hn::Set(df, -126.0f)), hn::Mul(p, hn::BitCast(df, e)));
}

}  // namespace pagedattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
