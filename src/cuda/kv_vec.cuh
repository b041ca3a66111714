// Internal (CUDA): loading 8 consecutive K/V or Q elements of any supported dtype as floats.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "pagedattn/dtype.h"

namespace pagedattn::cuda {

// Storage types of the cache dtypes.
struct Fp8E4M3 { std::uint8_t bits; };
struct Fp8E5M2 { std::uint8_t bits; };

__device__ __forceinline__ void fp8x2_to_float2(std::uint16_t bits, __nv_fp8_interpretation_t kind,
                                                float& a, float& b) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits), kind);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&raw));
  a = f.x;
  b = f.y;
}

// Converts 8 consecutive elements of a KV type (16-byte aligned, any address space) to floats.
template <class KV>
__device__ __forceinline__ void convert8(const void* raw, float (&f)[8]) {
  if constexpr (std::is_same_v<KV, float>) {
    const float4 a = static_cast<const float4*>(raw)[0], b = static_cast<const float4*>(raw)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else if constexpr (std::is_same_v<KV, __nv_bfloat16> || std::is_same_v<KV, __half>) {
    const uint4 r = *static_cast<const uint4*>(raw);
    const std::uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 v;
      if constexpr (std::is_same_v<KV, __nv_bfloat16>) {
        v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
      } else {
        v = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      }
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  } else {
    constexpr auto kind = std::is_same_v<KV, Fp8E4M3> ? __NV_E4M3 : __NV_E5M2;
    const uint2 r = *static_cast<const uint2*>(raw);
    const std::uint32_t w[2] = {r.x, r.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      fp8x2_to_float2(static_cast<std::uint16_t>(w[i] & 0xffffu), kind, f[4 * i], f[4 * i + 1]);
      fp8x2_to_float2(static_cast<std::uint16_t>(w[i] >> 16), kind, f[4 * i + 2], f[4 * i + 3]);
    }
  }
}

// The two fp8 values in bits [16 * half, 16 * half + 16) of word as an f16 pair, exactly (f16
// holds every e4m3 and e5m2 value).
template <class KV>
__device__ __forceinline__ std::uint32_t fp8x2_to_f16x2(std::uint32_t word, int half) {
  if constexpr (std::is_same_v<KV, Fp8E5M2>) {
    // e5m2 is the top byte of an f16: place the pair's bytes in the high halves.
    return __byte_perm(word, 0u, half ? 0x3424u : 0x1404u);
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    // The half taken as a 16-bit register half, so that no shift extracts it first.
    std::uint32_t out;
    if (half) asm("{ .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n }" : "=r"(out) : "r"(word));
    else asm("{ .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n }" : "=r"(out) : "r"(word));
    return out;
#else
    const auto pair = static_cast<__nv_fp8x2_storage_t>((word >> (16 * half)) & 0xffffu);
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    return static_cast<std::uint32_t>(h.x) | (static_cast<std::uint32_t>(h.y) << 16);
#endif
  }
}

// Widens 16 fp8 values (one 16-byte chunk) to f16. lo gets elements 0-7, hi elements 8-15.
template <class KV>
__device__ __forceinline__ void widen_fp8x16_to_f16(const uint4& raw, uint4& lo, uint4& hi) {
  const std::uint32_t in[4] = {raw.x, raw.y, raw.z, raw.w};
  std::uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = fp8x2_to_f16x2<KV>(in[i / 2], i % 2);
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<Q>{}) with Q the storage type of a query dtype (f32, f16 or bf16). One switch
// around a whole block of loads lets them all be in flight at once; load_one's switch per
// element makes each load wait for the previous one's use (a 64-element q fragment then took
// microseconds at every CTA start).
template <class F>
__device__ __forceinline__ void visit_q_type(DType t, F&& f) {
  switch (t) {
    case DType::kF32: f(TypeTag<float>{}); break;
    case DType::kF16: f(TypeTag<__half>{}); break;
    default: f(TypeTag<__nv_bfloat16>{}); break;
  }
}
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// One element of any float dtype (run-time type), for strided layouts and for Q/out.
__device__ __forceinline__ float load_one(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF16: return __half2float(static_cast<const __half*>(base)[i]);
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kF8E4M3: {
      float a, b;
      fp8x2_to_float2(static_cast<const std::uint8_t*>(base)[i], __NV_E4M3, a, b);
      return a;
    }
    case DType::kF8E5M2: {
      float a, b;
      fp8x2_to_float2(static_cast<const std::uint8_t*>(base)[i], __NV_E5M2, a, b);
      return a;
    }
    default: return 0.0f;
  }
}

__device__ __forceinline__ void store_one(void* base, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(base)[i] = v; break;
    case DType::kF16: static_cast<__half*>(base)[i] = __float2half_rn(v); break;
    case DType::kBF16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); break;
    default: break;
  }
}

}  // namespace pagedattn::cuda
