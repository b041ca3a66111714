// Internal, per SIMD target: reading K/V cache rows of any dtype and layout as f32.
//
// Include this after <hwy/foreach_target.h> in a translation unit that compiles once per target
// (HWY_TARGET_INCLUDE); it follows Highway's per-target header convention (toggle guard), so
// every target gets its own copy inside pagedattn::cpu::HWY_NAMESPACE.
//
// What it offers:
//   load_f32<kT>(df, row, i)       Lanes(df) elements [i, i + Lanes) of a dim-contiguous row of
//                                  dtype kT, decoded to f32. fp8 values are returned *unscaled*
//                                  (the caller folds k_scale / v_scale into q or the output).
//   convert_f32<kT>(src, n, dst)   n contiguous elements -> f32 (any n).
//   gather_rows_f32<kT>(t, page, head, tok0, n, head_dim, dst)
//                                  tokens [tok0, tok0 + n) of one page and head, from any layout
//                                  that KVTensorAccess describes, into dst [n][head_dim] f32.
//   gather_dims_f32<kT>(t, page, head, tok0, n, head_dim, ld, dst)
//                                  the same into dst [head_dim][ld] f32 (dim-major).
#if defined(PAGEDATTN_CPU_KV_ROWS_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PAGEDATTN_CPU_KV_ROWS_H_
#undef PAGEDATTN_CPU_KV_ROWS_H_
#else
#define PAGEDATTN_CPU_KV_ROWS_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <hwy/highway.h>

#include "core/problem.h"
#include "pagedattn/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace pagedattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Storage type of one cache element of dtype kT.
template <DType kT>
using KVStorage = std::conditional_t<
    kT == DType::kF32, float,
    std::conditional_t<kT == DType::kF16 || kT == DType::kBF16, std::uint16_t, std::uint8_t>>;

// IEEE half bit patterns (u16 lanes) to f32. Highway's software conversion (x86 targets without
// F16C, i.e. SSE4 and below, and the scalar ones) turns infinities and NaNs into finite values;
// they are put back here.
template <class DF, class VU16>
HWY_INLINE hn::Vec<DF> f16_bits_to_f32(DF df, VU16 bits) {
  const hn::Rebind<hwy::float16_t, DF> df16;
  const auto f = hn::PromoteTo(df, hn::BitCast(df16, bits));
#if HWY_TARGET >= HWY_SSE4 || defined(HWY_DISABLE_F16C)
  const hn::RebindToUnsigned<DF> du32;
  const auto b = hn::PromoteTo(du32, bits);
  const auto special = hn::Eq(hn::And(b, hn::Set(du32, 0x7c00u)), hn::Set(du32, 0x7c00u));
  const auto ieee = hn::Or(hn::Or(hn::ShiftLeft<16>(hn::And(b, hn::Set(du32, 0x8000u))), hn::Set(du32, 0x7f800000u)),
                           hn::ShiftLeft<13>(hn::And(b, hn::Set(du32, 0x3ffu))));
  return hn::IfThenElse(hn::RebindMask(df, special), hn::BitCast(df, ieee), f);
#else
  return f;
#endif
}

template <DType kT, class DF>
HWY_INLINE hn::Vec<DF> load_f32(DF df, const std::byte* row, std::size_t i) {
  if constexpr (kT == DType::kF32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + i);
  } else if constexpr (kT == DType::kBF16) {
    // bf16 is the upper half of an f32: widen and shift (exact).
    const hn::Rebind<std::uint16_t, DF> du16;
    const hn::RebindToUnsigned<DF> du32;
    const auto h = hn::LoadU(du16, reinterpret_cast<const std::uint16_t*>(row) + i);
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, h)));
  } else if constexpr (kT == DType::kF16) {
    const hn::Rebind<std::uint16_t, DF> du16;
    return f16_bits_to_f32(df, hn::LoadU(du16, reinterpret_cast<const std::uint16_t*>(row) + i));
  } else if constexpr (kT == DType::kF8E5M2) {
    // e5m2 is the upper byte of an IEEE half.
    const hn::Rebind<std::uint8_t, DF> du8;
    const hn::Rebind<std::uint16_t, DF> du16;
    const auto b = hn::PromoteTo(du16, hn::LoadU(du8, reinterpret_cast<const std::uint8_t*>(row) + i));
    return f16_bits_to_f32(df, hn::ShiftLeft<8>(b));
  } else {
    static_assert(kT == DType::kF8E4M3, "unsupported KV dtype");
    // e4m3 (bias 7): exponent and mantissa moved into an IEEE half's (bias 15) give the value
    // times 2^-8, subnormals included; the half converts exactly and is scaled back by 2^8.
    // (Built as an f32 with a 2^-120 bias instead, the subnormals made denormal f32 operands, and
    // each multiply with one took a microcode assist: ~8x slower.)
    const hn::Rebind<std::uint8_t, DF> du8;
    const hn::Rebind<std::uint16_t, DF> du16;
    const auto b = hn::PromoteTo(du16, hn::LoadU(du8, reinterpret_cast<const std::uint8_t*>(row) + i));
    const auto mag = hn::And(b, hn::Set(du16, 0x7fu));
    const auto sign = hn::ShiftLeft<8>(hn::Xor(b, mag));  // the code's sign bit in a half's place
    const auto half = hn::Or(sign, hn::ShiftLeft<7>(mag));
    // 0x7f and 0xff are NaN: a half NaN of the code's sign (as dtype.h decodes it, so that a
    // cache write from e4m3 rows stores the same bytes on every backend), before the conversion.
    const auto nan_half = hn::IfThenElse(hn::Eq(mag, hn::Set(du16, 0x7fu)), hn::Or(sign, hn::Set(du16, 0x7e00u)), half);
    return hn::Mul(f16_bits_to_f32(df, nan_half), hn::Set(df, 256.0f));
  }
}

// dst[0, n) = src[0, n) decoded to f32 (unscaled).
template <DType kT>
HWY_INLINE void convert_f32(const std::byte* src, std::size_t n, float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::CappedTag<float, 4> d4;
  const std::size_t N = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(load_f32<kT>(df, src, i), df, dst + i);
  for (; i + 4 <= n; i += 4) hn::StoreU(load_f32<kT>(d4, src, i), d4, dst + i);
  for (; i < n; ++i) dst[i] = load_as_float(src, kT, static_cast<std::int64_t>(i));
}

// dst [n][head_dim] f32 = tokens [tok0, tok0 + n) of (page, head), decoded and unscaled.
// Handles every layout: dims in chunks of contiguous elements (NHD, HND, vLLM K) or dims
// strided with tokens contiguous (vLLM V, transposed through a small buffer).
template <DType kT>
HWY_NOINLINE void gather_rows_f32(const detail::KVTensorAccess& t, std::int64_t page,
                                  std::int64_t head, std::int64_t tok0, std::int64_t n,
                                  std::int64_t head_dim, float* HWY_RESTRICT dst) {
  constexpr auto kSize = static_cast<std::int64_t>(sizeof(KVStorage<kT>));
  const std::byte* base = t.data + (page * t.page_stride + head * t.head_stride) * kSize;
  if (t.elem_stride == 1) {
    const std::int64_t chunks = head_dim / t.chunk_len;
    // Chunks of whole vectors (vLLM K: 16 bytes of elements each) without convert_f32's tails.
    const hn::ScalableTag<float> df;
    const hn::CappedTag<float, 4> d4;
    const auto N = static_cast<std::int64_t>(hn::Lanes(df)), N4 = static_cast<std::int64_t>(hn::Lanes(d4));
    const auto whole_chunks = [&](auto d, std::int64_t lanes) {
      for (std::int64_t j = 0; j < n; ++j) {
        const std::byte* row = base + (tok0 + j) * t.token_stride * kSize;
        float* out = dst + j * head_dim;
        for (std::int64_t c = 0; c < chunks; ++c) {
          const std::byte* chunk = row + c * t.chunk_stride * kSize;
          for (std::int64_t i = 0; i < t.chunk_len; i += lanes) {
            hn::StoreU(load_f32<kT>(d, chunk, static_cast<std::size_t>(i)), d, out + c * t.chunk_len + i);
          }
        }
      }
    };
    if (t.chunk_len % N == 0) return whole_chunks(df, N);
    if (t.chunk_len % N4 == 0) return whole_chunks(d4, N4);
    for (std::int64_t j = 0; j < n; ++j) {
      const std::byte* row = base + (tok0 + j) * t.token_stride * kSize;
      for (std::int64_t c = 0; c < chunks; ++c) {
        convert_f32<kT>(row + c * t.chunk_stride * kSize, static_cast<std::size_t>(t.chunk_len),
                        dst + j * head_dim + c * t.chunk_len);
      }
    }
    return;
  }
  // Dims strided (vLLM V: tokens contiguous per dim): convert each dim's run of n tokens, then
  // scatter it into the row-major tile.
  constexpr std::int64_t kRun = 64;
  HWY_ALIGN float run[kRun];
  for (std::int64_t j0 = 0; j0 < n; j0 += kRun) {
    const std::int64_t m = n - j0 < kRun ? n - j0 : kRun;
    for (std::int64_t d = 0; d < head_dim; ++d) {
      const std::int64_t dim_offset = (d / t.chunk_len) * t.chunk_stride + (d % t.chunk_len) * t.elem_stride;
      const std::byte* src = base + (dim_offset + (tok0 + j0) * t.token_stride) * kSize;
      if (t.token_stride == 1) {
        convert_f32<kT>(src, static_cast<std::size_t>(m), run);
      } else {
        for (std::int64_t j = 0; j < m; ++j) run[j] = load_as_float(src, kT, j * t.token_stride);
      }
      for (std::int64_t j = 0; j < m; ++j) dst[(j0 + j) * head_dim + d] = run[j];
    }
  }
}

// dst[d * ld + j] f32 = dim d of token tok0 + j of (page, head), decoded and unscaled, for
// j < n: the tile dim-major, as a layout with strided dims (vLLM V: [dim][token] pages) holds
// it, so that each dim's run of tokens converts in one piece (no scatter).
template <DType kT>
HWY_NOINLINE void gather_dims_f32(const detail::KVTensorAccess& t, std::int64_t page, std::int64_t head,
                                  std::int64_t tok0, std::int64_t n, std::int64_t head_dim, std::int64_t ld,
                                  float* HWY_RESTRICT dst) {
  constexpr auto kSize = static_cast<std::int64_t>(sizeof(KVStorage<kT>));
  const std::byte* base = t.data + (page * t.page_stride + head * t.head_stride + tok0 * t.token_stride) * kSize;
  const hn::ScalableTag<float> df;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t d = 0, c = 0, e = 0; d < head_dim; ++d) {  // d = c * chunk_len + e, no divisions
    const std::byte* src = base + (c * t.chunk_stride + e * t.elem_stride) * kSize;
    if (++e == t.chunk_len) e = 0, ++c;
    if (t.token_stride == 1 && n % N == 0) {  // whole pages of 8, 16, ... tokens
      for (std::int64_t j = 0; j < n; j += N) hn::StoreU(load_f32<kT>(df, src, static_cast<std::size_t>(j)), df, dst + d * ld + j);
    } else if (t.token_stride == 1) {
      convert_f32<kT>(src, static_cast<std::size_t>(n), dst + d * ld);
    } else {
      for (std::int64_t j = 0; j < n; ++j) dst[d * ld + j] = load_as_float(src, kT, j * t.token_stride);
    }
  }
}

}  // namespace pagedattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
