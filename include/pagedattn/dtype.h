// pagedattn — element types and their scalar conversions to and from float.
//
// The conversions are exact bit manipulations (round-to-nearest-even on narrowing), usable
// on the host in any translation unit; SIMD kernels have their own vector versions.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

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

inline float bf16_to_float(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline std::uint16_t float_to_f16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (x < 0x38800000u) {                          // below 2^-14: f16 subnormal (or zero)
    const float scaled = std::nearbyint(std::bit_cast<float>(x) * 16777216.0f);  // * 2^24
    return sign | static_cast<std::uint16_t>(scaled);
  }
  x += 0xc8000fffu + ((x >> 13) & 1u);  // rebias exponent by -112 and round to nearest even
  return sign | static_cast<std::uint16_t>(x >> 13);
}

namespace detail {
// Saturating round-to-nearest-even encoder for a small float format with `kMant` mantissa
// bits and exponent bias `kBias`; `max_code` is the largest finite magnitude's bit pattern.
template <int kMant, int kBias>
inline std::uint8_t encode_small_float(float f, float max_finite, std::uint8_t max_code,
                                       std::uint8_t nan_code) {
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return sign | nan_code;
  const float a = std::fabs(f);
  if (a >= max_finite) return sign | max_code;  // saturate (KV caches prefer clipping to inf)
  if (a == 0.0f) return sign;                   // frexp(0) gives no usable exponent
  int e = 0;
  std::frexp(a, &e);                       // a = m * 2^e, m in [0.5, 1)
  const int exp = std::max(e - 1, 1 - kBias);  // subnormals share the smallest exponent
  const int q = static_cast<int>(std::nearbyint(std::ldexp(a, kMant - exp)));  // [0, 2^(kMant+1)]
  // A carry of q into 2^(kMant+1) correctly bumps the exponent field.
  return sign | static_cast<std::uint8_t>(((exp + kBias - 1) << kMant) + q);
}
}  // namespace detail

inline float fp8_e4m3_to_float(std::uint8_t b) {
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  float v;
  if (exp == 0xf && mant == 0x7) v = std::numeric_limits<float>::quiet_NaN();
  else if (exp == 0) v = std::ldexp(static_cast<float>(mant), -9);
  else v = std::ldexp(static_cast<float>(8 + mant), exp - 10);
  return (b & 0x80) ? -v : v;
}

inline std::uint8_t float_to_fp8_e4m3(float f) {
  return detail::encode_small_float<3, 7>(f, 448.0f, 0x7e, 0x7f);
}

// e5m2 is the upper byte of an IEEE half.
inline float fp8_e5m2_to_float(std::uint8_t b) {
  return f16_to_float(static_cast<std::uint16_t>(b << 8));
}

inline std::uint8_t float_to_fp8_e5m2(float f) {
  if (std::isinf(f)) return std::signbit(f) ? 0xfb : 0x7b;  // saturate like finite overflow
  return detail::encode_small_float<2, 15>(f, 57344.0f, 0x7b, 0x7f);
}

// Reads element `i` of a float-typed buffer as float.
inline float load_as_float(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF16: return f16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kBF16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kF8E4M3: return fp8_e4m3_to_float(static_cast<const std::uint8_t*>(base)[i]);
    case DType::kF8E5M2: return fp8_e5m2_to_float(static_cast<const std::uint8_t*>(base)[i]);
    default: return std::numeric_limits<float>::quiet_NaN();
  }
}

// Writes `v` as element `i` of a float-typed buffer, rounding to nearest even.
inline void store_from_float(void* base, DType t, std::int64_t i, float v) {
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
