// Rows between a storage dtype and f32 (row_convert.h), on Highway vectors with runtime dispatch.
// Loads decode with the KV loads of kv_rows.h; the element-by-element forms of dtype.h below the
// vector loops give the same results (the tails, and stores of f16 and fp8, use them).
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

void LoadScaledRowImpl(const std::byte* row, DType t, std::int64_t n, float scale, float* out) {
  std::int64_t i = 0;
  switch (t) {
    case DType::kF32: i = load_scaled_vectors<DType::kF32>(row, n, scale, out); break;
    case DType::kBF16: i = load_scaled_vectors<DType::kBF16>(row, n, scale, out); break;
    case DType::kF16: i = load_scaled_vectors<DType::kF16>(row, n, scale, out); break;
    case DType::kF8E4M3: i = load_scaled_vectors<DType::kF8E4M3>(row, n, scale, out); break;
    case DType::kF8E5M2: i = load_scaled_vectors<DType::kF8E5M2>(row, n, scale, out); break;
    default: break;
  }
  load_scaled_tail(row, t, i, n, scale, out);
}

void StoreScaledRowImpl(const float* x, std::int64_t n, float scale, DType t, std::byte* row) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const hn::RebindToSigned<decltype(df)> di32;
  const hn::Rebind<std::uint16_t, decltype(df)> du16;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, scale);
  std::int64_t i = 0;
  switch (t) {
    case DType::kF32:
      for (auto* r = reinterpret_cast<float*>(row); i + N <= n; i += N) {
        hn::StoreU(hn::Mul(hn::LoadU(df, x + i), vs), df, r + i);
      }
      break;
    case DType::kBF16:  // as float_to_bf16: round to nearest even, NaN kept quiet
      for (auto* r = reinterpret_cast<std::uint16_t*>(row); i + N <= n; i += N) {
        const auto u = hn::BitCast(du32, hn::Mul(hn::LoadU(df, x + i), vs));
        const auto hi = hn::ShiftRight<16>(u);
        const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du32, 0x7fffu), hn::And(hi, hn::Set(du32, 1u)))));
        const auto nan = hn::Gt(hn::BitCast(di32, hn::And(u, hn::Set(du32, 0x7fffffffu))), hn::Set(di32, 0x7f800000));
        const auto bits = hn::IfThenElse(hn::RebindMask(du32, nan), hn::Or(hi, hn::Set(du32, 0x40u)), rounded);
        hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, bits)), du16, r + i);  // values < 2^16
      }
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

void load_scaled_row(const std::byte* row, DType t, std::int64_t n, float scale, float* out) {
  HWY_DYNAMIC_DISPATCH(LoadScaledRowImpl)(row, t, n, scale, out);
}

void store_scaled_row(const float* x, std::int64_t n, float scale, DType t, std::byte* row) {
  HWY_DYNAMIC_DISPATCH(StoreScaledRowImpl)(x, n, scale, t, row);
}
}  // namespace pagedattn::cpu
#endif  // HWY_ONCE
