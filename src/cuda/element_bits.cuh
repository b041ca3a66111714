// Internal (CUDA): elements of any float dtype moved as raw bits (up to 32 bits in a uint32),
// converted with the scalar conversions of pagedattn/dtype.h, which are the CPU backend's own
// (host/device functions), so a GPU write rounds exactly as the CPU one does. Runs of 8
// elements load and store as one vector when the caller has checked the alignment.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "pagedattn/dtype.h"

namespace pagedattn::cuda {

// Elements per vector run. Every head_dim is a multiple of 8.
constexpr int kRun = 8;

// The float value of one element's bits.
__device__ __forceinline__ float decode_bits(DType t, std::uint32_t b) {
  switch (t) {
    case DType::kF32: return detail::bits_float(b);
    case DType::kF16: return f16_to_float(static_cast<std::uint16_t>(b));
    case DType::kBF16: return bf16_to_float(static_cast<std::uint16_t>(b));
    case DType::kF8E4M3: return fp8_e4m3_to_float(static_cast<std::uint8_t>(b));
    case DType::kF8E5M2: return fp8_e5m2_to_float(static_cast<std::uint8_t>(b));
    default: return detail::quiet_nan_f();
  }
}

// x rounded to dtype t (nearest even; fp8 saturates), as bits.
__device__ __forceinline__ std::uint32_t encode_bits(DType t, float x) {
  switch (t) {
    case DType::kF32: return detail::float_bits(x);
    case DType::kF16: return float_to_f16(x);
    case DType::kBF16: return float_to_bf16(x);
    case DType::kF8E4M3: return float_to_fp8_e4m3(x);
    case DType::kF8E5M2: return float_to_fp8_e5m2(x);
    default: return 0;
  }
}

// Element i (of esize bytes) of base.
__device__ __forceinline__ std::uint32_t load_bits(const std::byte* base, int esize, std::int64_t i) {
  switch (esize) {
    case 1: return reinterpret_cast<const std::uint8_t*>(base)[i];
    case 2: return reinterpret_cast<const std::uint16_t*>(base)[i];
    default: return reinterpret_cast<const std::uint32_t*>(base)[i];
  }
}

__device__ __forceinline__ void store_bits(std::byte* base, int esize, std::int64_t i, std::uint32_t b) {
  switch (esize) {
    case 1: reinterpret_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(b); break;
    case 2: reinterpret_cast<std::uint16_t*>(base)[i] = static_cast<std::uint16_t>(b); break;
    default: reinterpret_cast<std::uint32_t*>(base)[i] = b; break;
  }
}

// True when kRun elements of esize bytes at p can move as one vector: 8 bytes for fp8, 16 for
// 16-bit types, two of 16 for f32.
__host__ __device__ __forceinline__ std::size_t run_alignment(int esize) {
  return esize == 1 ? 8 : 16;
}

// Elements [0, 8) at p (aligned to run_alignment(esize)); element 0 is the lowest address
// (little-endian lanes).
__device__ __forceinline__ void load_run(const std::byte* p, int esize, std::uint32_t (&b)[kRun]) {
  if (esize == 4) {
    const uint4 lo = reinterpret_cast<const uint4*>(p)[0], hi = reinterpret_cast<const uint4*>(p)[1];
    b[0] = lo.x, b[1] = lo.y, b[2] = lo.z, b[3] = lo.w, b[4] = hi.x, b[5] = hi.y, b[6] = hi.z, b[7] = hi.w;
  } else if (esize == 2) {
    const uint4 r = *reinterpret_cast<const uint4*>(p);
    const std::uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) b[2 * i] = w[i] & 0xffffu, b[2 * i + 1] = w[i] >> 16;
  } else {
    const uint2 r = *reinterpret_cast<const uint2*>(p);
    const std::uint32_t w[2] = {r.x, r.y};
#pragma unroll
    for (int i = 0; i < 8; ++i) b[i] = (w[i / 4] >> (8 * (i % 4))) & 0xffu;
  }
}

__device__ __forceinline__ void store_run(std::byte* p, int esize, const std::uint32_t (&b)[kRun]) {
  if (esize == 4) {
    reinterpret_cast<uint4*>(p)[0] = make_uint4(b[0], b[1], b[2], b[3]);
    reinterpret_cast<uint4*>(p)[1] = make_uint4(b[4], b[5], b[6], b[7]);
  } else if (esize == 2) {
    *reinterpret_cast<uint4*>(p) = make_uint4(b[0] | (b[1] << 16), b[2] | (b[3] << 16),
                                              b[4] | (b[5] << 16), b[6] | (b[7] << 16));
  } else {
    *reinterpret_cast<uint2*>(p) = make_uint2(b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24),
                                              b[4] | (b[5] << 8) | (b[6] << 16) | (b[7] << 24));
  }
}

}  // namespace pagedattn::cuda
