// Rows between a storage dtype and f32 (row_convert.h), on Highway vectors with runtime dispatch.
// Loads decode with the KV loads of kv_rows.h; stores round with integer operations on the f32
// bits, bit for bit as the element-by-element forms of dtype.h, which the tails use.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/row_convert.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "cpu/kv_rows.h"
#include "cpu/row_convert.h"

HWY_BEFORE_NAMESPACE();
namespace pagedattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {
// The element-by-element forms, for the dtypes without a vector loop and for the tails.
void load_scaled_tail(const std::byte* row, DType t, std::int64_t i0, std::int64_t n, float scale, float* out) {
  for (std::int64_t i = i0; i < n; ++i) out[i] = load_as_float(row, t, i) * scale;
}
void store_scaled_tail(const float* x, std::int64_t i0, std::int64_t n, float scale, DType t, std::byte* row) {
  for (std::int64_t i = i0; i < n; ++i) store_from_float(row, t, i, x[i] * scale);
}
}  // namespace

// out[i, i + N) = row's elements there, decoded by the KV loads (kv_rows.h) and scaled.
template <DType kT>
std::int64_t load_scaled_vectors(const std::byte* row, std::int64_t n, float scale, float* out) {
  const hn::ScalableTag<float> df;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(load_f32<kT>(df, row, static_cast<std::size_t>(i)), hn::Set(df, scale)), df, out + i);
  return i;
}

// f.template operator()<kT>() for t's float dtype kT (0 for a dtype that is none).
template <class F>
std::int64_t with_float_dtype(DType t, const F& f) {
  switch (t) {
    case DType::kF32: return f.template operator()<DType::kF32>();
    case DType::kBF16: return f.template operator()<DType::kBF16>();
    case DType::kF16: return f.template operator()<DType::kF16>();
    case DType::kF8E4M3: return f.template operator()<DType::kF8E4M3>();
    case DType::kF8E5M2: return f.template operator()<DType::kF8E5M2>();
    default: return 0;
  }
}

void LoadScaledRowImpl(const std::byte* row, DType t, std::int64_t n, float scale, float* out) {
  const std::int64_t i = with_float_dtype(t, [&]<DType kT>() { return load_scaled_vectors<kT>(row, n, scale, out); });
  load_scaled_tail(row, t, i, n, scale, out);
}

// acc[i, i + N) += row's elements there times scale, for the dtype's lanes.
template <DType kT>
std::int64_t add_scaled_vectors(const std::byte* row, std::int64_t n, float scale, float* acc) {
  const hn::ScalableTag<float> df;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, scale);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::MulAdd(load_f32<kT>(df, row, static_cast<std::size_t>(i)), vs, hn::LoadU(df, acc + i)), df, acc + i);
  }
  return i;
}

void AddScaledRowImpl(const std::byte* row, DType t, std::int64_t n, float scale, float* acc) {
  std::int64_t i = with_float_dtype(t, [&]<DType kT>() { return add_scaled_vectors<kT>(row, n, scale, acc); });
  for (; i < n; ++i) acc[i] += load_as_float(row, t, i) * scale;
}

namespace {
using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using VI = hn::Vec<DI>;

// The f32 bits of v without their sign (as i32: comparisons on them order the magnitudes), and
// the sign moved to bit `kSignBit`. (The encoders below write a >= c as a > c - 1: Highway 1.0
// has no Ge on integer lanes.)
template <int kSignBit>
HWY_INLINE void magnitude_and_sign(hn::Vec<DF> v, VI& a, VI& sign) {
  const DI di;
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, v);
  a = hn::BitCast(di, hn::And(u, hn::Set(du, 0x7fffffffu)));
  sign = hn::BitCast(di, hn::ShiftLeft<kSignBit>(hn::ShiftRight<31>(u)));
}

// float_to_bf16's bits for every lane: round to nearest even, NaN kept quiet.
HWY_INLINE VI bf16_bits(hn::Vec<DF> v) {
  const DI di;
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, v);
  const auto hi = hn::ShiftRight<16>(u);
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), hn::And(hi, hn::Set(du, 1u)))));
  const auto nan = hn::Gt(hn::BitCast(di, hn::And(u, hn::Set(du, 0x7fffffffu))), hn::Set(di, 0x7f800000));
  return hn::BitCast(di, hn::IfThenElse(hn::RebindMask(du, nan), hn::Or(hi, hn::Set(du, 0x40u)), rounded));
}

// float_to_f16's bits for every lane: round to nearest even, overflow to infinity, subnormals
// rounded from the value times 2^24, NaN quiet.
HWY_INLINE VI f16_bits(hn::Vec<DF> v) {
  const DF df;
  const DI di;
  VI a, sign;
  magnitude_and_sign<15>(v, a, sign);
  // Normal: the exponent rebiased by -112 and 13 mantissa bits rounded off (dtype.h's constant).
  const auto normal = hn::ShiftRight<13>(hn::Add(a, hn::Add(hn::Set(di, static_cast<std::int32_t>(0xc8000fffu)),
                                                            hn::And(hn::ShiftRight<13>(a), hn::Set(di, 1)))));
  // (From the magnitude clamped below the smallest normal, so that no lane converts a value
  // out of int range.)
  const auto small = hn::Min(a, hn::Set(di, 0x38800000));
  const auto subnormal = hn::ConvertTo(di, hn::Round(hn::Mul(hn::BitCast(df, small), hn::Set(df, 16777216.0f))));
  auto code = hn::IfThenElse(hn::Lt(a, hn::Set(di, 0x38800000)), subnormal, normal);
  code = hn::IfThenElse(hn::Gt(a, hn::Set(di, 0x477ff000 - 1)), hn::Set(di, 0x7c00), code);
  code = hn::IfThenElse(hn::Gt(a, hn::Set(di, 0x7f800000)), hn::Set(di, 0x7e00), code);
  return hn::Or(code, sign);
}

// detail::encode_small_float's code for every lane (kMant mantissa bits, exponent bias kBias):
// round to nearest even, saturating at the largest finite value (infinities too), NaN kept.
template <int kMant, int kBias>
HWY_INLINE VI fp8_bits(hn::Vec<DF> v, std::int32_t max_finite_bits, std::int32_t max_code) {
  const DF df;
  const DI di;
  constexpr int kDrop = 23 - kMant;
  VI a, sign;
  magnitude_and_sign<7>(v, a, sign);
  // Normal: the exponent rebiased, the mantissa rounded to kMant bits; a carry bumps the exponent.
  const auto rebased = hn::Sub(a, hn::Set(di, (127 - kBias) << 23));
  const auto normal = hn::ShiftRight<kDrop>(hn::Add(rebased, hn::Add(hn::Set(di, (1 << (kDrop - 1)) - 1),
                                                                     hn::And(hn::ShiftRight<kDrop>(rebased), hn::Set(di, 1)))));
  // Below the smallest normal: whole units of the smallest subnormal, 2^(1 - kBias - kMant).
  // (From the magnitude clamped there, so that no lane converts a value out of int range.)
  const auto min_normal = hn::Set(di, (127 - kBias + 1) << 23);
  const auto unit = hn::Set(df, static_cast<float>(1 << (kBias - 1 + kMant)));
  const auto subnormal = hn::ConvertTo(di, hn::Round(hn::Mul(hn::BitCast(df, hn::Min(a, min_normal)), unit)));
  auto code = hn::IfThenElse(hn::Lt(a, min_normal), subnormal, normal);
  code = hn::IfThenElse(hn::Gt(a, hn::Set(di, max_finite_bits - 1)), hn::Set(di, max_code), code);
  code = hn::IfThenElse(hn::Gt(a, hn::Set(di, 0x7f800000)), hn::Set(di, 0x7f), code);
  return hn::Or(code, sign);
}

// row[i, i + N) = the dtype's encoding of x[i, i + N) * scale, for whole vectors; returns the
// first element not stored.
template <class T, class Encode>
std::int64_t store_scaled_vectors(const float* x, std::int64_t n, float scale, std::byte* row, const Encode& encode) {
  const DF df;
  const hn::Rebind<T, DF> dt;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, scale);
  auto* out = reinterpret_cast<T*>(row);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dt, encode(hn::Mul(hn::LoadU(df, x + i), vs))), dt, out + i);
  return i;
}
}  // namespace

void StoreScaledRowImpl(const float* x, std::int64_t n, float scale, DType t, std::byte* row) {
  const DF df;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, scale);
  std::int64_t i = 0;
  switch (t) {
    case DType::kF32:
      for (auto* r = reinterpret_cast<float*>(row); i + N <= n; i += N) {
        hn::StoreU(hn::Mul(hn::LoadU(df, x + i), vs), df, r + i);
      }
      break;
    // Codes below 2^16 (2^8): the saturating demotions keep them.
    case DType::kBF16: i = store_scaled_vectors<std::uint16_t>(x, n, scale, row, bf16_bits); break;
    case DType::kF16: i = store_scaled_vectors<std::uint16_t>(x, n, scale, row, f16_bits); break;
    case DType::kF8E4M3:
      i = store_scaled_vectors<std::uint8_t>(x, n, scale, row, [](hn::Vec<DF> v) { return fp8_bits<3, 7>(v, 0x43e00000, 0x7e); });
      break;
    case DType::kF8E5M2:
      i = store_scaled_vectors<std::uint8_t>(x, n, scale, row, [](hn::Vec<DF> v) { return fp8_bits<2, 15>(v, 0x47600000, 0x7b); });
      break;
    default:
      break;
  }
  store_scaled_tail(x, i, n, scale, t, row);
}

}  // namespace pagedattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pagedattn::cpu {
HWY_EXPORT(LoadScaledRowImpl);
HWY_EXPORT(StoreScaledRowImpl);
HWY_EXPORT(AddScaledRowImpl);

void load_scaled_row(const std::byte* row, DType t, std::int64_t n, float scale, float* out) {
  HWY_DYNAMIC_DISPATCH(LoadScaledRowImpl)(row, t, n, scale, out);
}

void store_scaled_row(const float* x, std::int64_t n, float scale, DType t, std::byte* row) {
  HWY_DYNAMIC_DISPATCH(StoreScaledRowImpl)(x, n, scale, t, row);
}

void add_scaled_row(const std::byte* row, DType t, std::int64_t n, float scale, float* acc) {
  HWY_DYNAMIC_DISPATCH(AddScaledRowImpl)(row, t, n, scale, acc);
}
}  // namespace pagedattn::cpu
#endif  // HWY_ONCE
