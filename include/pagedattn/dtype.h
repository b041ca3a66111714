// pagedattn — element types and their scalar conversions to and from float.
//
// The conversions are exact bit manipulations (round-to-nearest-even on narrowing), usable
// on the host in any translation unit and, compiled by nvcc, in CUDA kernels too: the GPU
// cache writes call these same functions so that both backends store identical bytes. SIMD
// kernels have their own vector versions.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

// Host and device under nvcc; plain inline functions for every other compiler.
#if defined(__CUDACC__)
#define PAGEDATTN_HOST_DEVICE __host__ __device__ inline
#else
#define PAGEDATTN_HOST_DEVICE inline
#endif

namespace pagedattn {

enum class DType : std::uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // OCP e4m3fn: no infinities, max finite 448, NaN = 0x7f/0xff
  kF8E5M2,  // OCP e5m2: IEEE-like, max finite 57344
  kI32,     // index tensors: page tables, lengths, slot mappings
  kI64,
};

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kF8E4M3: case DType::kF8E5M2: return 1;
    case DType::kI64: return 8;
  }
  return 0;
}

constexpr bool is_fp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }
constexpr bool is_float(DType t) { return t != DType::kI32 && t != DType::kI64; }
constexpr bool is_index(DType t) { return t == DType::kI32 || t == DType::kI64; }

std::string_view to_string(DType t);
// Parses "f32|f16|bf16|fp8_e4m3|fp8_e5m2|i32|i64" (as printed by to_string); throws Error otherwise.
DType parse_dtype(std::string_view name);

// ---- scalar conversions --------------------------------------------------------------------

namespace detail {
// The few float primitives the conversions need, one definition per side: the std:: functions
// on the host, the CUDA equivalents in device code. All of them are exact (frexp, ldexp when
// the result is normal, rounding to the nearest integer with ties to even), so both sides
// compute the same bits.
PAGEDATTN_HOST_DEVICE std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}
PAGEDATTN_HOST_DEVICE float bits_float(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return std::bit_cast<float>(b);
#endif
}
PAGEDATTN_HOST_DEVICE float round_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}
PAGEDATTN_HOST_DEVICE float frexp_f(float x, int* e) {
#if defined(__CUDA_ARCH__)
  return frexpf(x, e);
#else
  return std::frexp(x, e);
#endif
}
PAGEDATTN_HOST_DEVICE float ldexp_f(float x, int e) {
#if defined(__CUDA_ARCH__)
  return ldexpf(x, e);
#else
  return std::ldexp(x, e);
#endif
}
PAGEDATTN_HOST_DEVICE bool is_nan_f(float x) { return (float_bits(x) & 0x7fffffffu) > 0x7f800000u; }
PAGEDATTN_HOST_DEVICE bool is_inf_f(float x) { return (float_bits(x) & 0x7fffffffu) == 0x7f800000u; }
PAGEDATTN_HOST_DEVICE bool sign_bit_f(float x) { return (float_bits(x) >> 31) != 0; }
PAGEDATTN_HOST_DEVICE float abs_f(float x) { return bits_float(float_bits(x) & 0x7fffffffu); }
PAGEDATTN_HOST_DEVICE float quiet_nan_f() { return bits_float(0x7fc00000u); }
}  // namespace detail

PAGEDATTN_HOST_DEVICE float bf16_to_float(std::uint16_t h) {
  return detail::bits_float(static_cast<std::uint32_t>(h) << 16);
}

PAGEDATTN_HOST_DEVICE std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = detail::float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

PAGEDATTN_HOST_DEVICE float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return detail::bits_float(detail::float_bits(v) | sign);
  }
  if (exp == 31) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
  return detail::bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

PAGEDATTN_HOST_DEVICE std::uint16_t float_to_f16(float f) {
  std::uint32_t x = detail::float_bits(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (x < 0x38800000u) {                          // below 2^-14: f16 subnormal (or zero)
    const float scaled = detail::round_even(detail::bits_float(x) * 16777216.0f);  // * 2^24
    return sign | static_cast<std::uint16_t>(scaled);
  }
  x += 0xc8000fffu + ((x >> 13) & 1u);  // rebias exponent by -112 and round to nearest even
  return sign | static_cast<std::uint16_t>(x >> 13);
}

namespace detail {
// Saturating round-to-nearest-even encoder for a small float format with `kMant` mantissa
// bits and exponent bias `kBias`; `max_code` is the largest finite magnitude's bit pattern.
template <int kMant, int kBias>
PAGEDATTN_HOST_DEVICE std::uint8_t encode_small_float(float f, float max_finite, std::uint8_t max_code,
                                       std::uint8_t nan_code) {
  const std::uint8_t sign = sign_bit_f(f) ? 0x80 : 0x00;
  if (is_nan_f(f)) return sign | nan_code;
  const float a = abs_f(f);
  if (a >= max_finite) return sign | max_code;  // saturate (KV caches prefer clipping to inf)
  if (a == 0.0f) return sign;                   // frexp(0) gives no usable exponent
  int e = 0;
  frexp_f(a, &e);                       // a = m * 2^e, m in [0.5, 1)
  const int exp = e - 1 > 1 - kBias ? e - 1 : 1 - kBias;  // subnormals share the smallest exponent
  const int q = static_cast<int>(round_even(ldexp_f(a, kMant - exp)));  // [0, 2^(kMant+1)]
  // A carry of q into 2^(kMant+1) correctly bumps the exponent field.
  return sign | static_cast<std::uint8_t>(((exp + kBias - 1) << kMant) + q);
}
}  // namespace detail

PAGEDATTN_HOST_DEVICE float fp8_e4m3_to_float(std::uint8_t b) {
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  float v;
  if (exp == 0xf && mant == 0x7) v = detail::quiet_nan_f();
  else if (exp == 0) v = detail::ldexp_f(static_cast<float>(mant), -9);
  else v = detail::ldexp_f(static_cast<float>(8 + mant), exp - 10);
  // The sign by its bit: a GPU's negation may not keep a NaN's payload and sign.
  return detail::bits_float(detail::float_bits(v) | (static_cast<std::uint32_t>(b & 0x80u) << 24));
}

PAGEDATTN_HOST_DEVICE std::uint8_t float_to_fp8_e4m3(float f) {
  return detail::encode_small_float<3, 7>(f, 448.0f, 0x7e, 0x7f);
}

// e5m2 is the upper byte of an IEEE half.
PAGEDATTN_HOST_DEVICE float fp8_e5m2_to_float(std::uint8_t b) {
  return f16_to_float(static_cast<std::uint16_t>(b << 8));
}

PAGEDATTN_HOST_DEVICE std::uint8_t float_to_fp8_e5m2(float f) {
  if (detail::is_inf_f(f)) return detail::sign_bit_f(f) ? 0xfb : 0x7b;  // saturate like finite overflow
  return detail::encode_small_float<2, 15>(f, 57344.0f, 0x7b, 0x7f);
}

// Reads element `i` of a float-typed buffer as float.
PAGEDATTN_HOST_DEVICE float load_as_float(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF16: return f16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kBF16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kF8E4M3: return fp8_e4m3_to_float(static_cast<const std::uint8_t*>(base)[i]);
    case DType::kF8E5M2: return fp8_e5m2_to_float(static_cast<const std::uint8_t*>(base)[i]);
    default: return detail::quiet_nan_f();
  }
}

// Writes `v` as element `i` of a float-typed buffer, rounding to nearest even.
PAGEDATTN_HOST_DEVICE void store_from_float(void* base, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(base)[i] = v; break;
    case DType::kF16: static_cast<std::uint16_t*>(base)[i] = float_to_f16(v); break;
    case DType::kBF16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16(v); break;
    case DType::kF8E4M3: static_cast<std::uint8_t*>(base)[i] = float_to_fp8_e4m3(v); break;
    case DType::kF8E5M2: static_cast<std::uint8_t*>(base)[i] = float_to_fp8_e5m2(v); break;
    default: break;
  }
}

}  // namespace pagedattn
