// Internal (CUDA): mma.sync m16n8k16 fragments shared by the tensor-core attention kernels:
// the MMA itself (bf16 or f16 inputs, f32 accumulators), ldmatrix loads of B fragments from
// shared memory, and packing two floats into a 16-bit pair for A fragments.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace pagedattn::cuda {

// Not volatile: a pure register operation, which the compiler may schedule among independent
// ones (the attention kernels' accumulator chains are latency-bound).
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem) {
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  }
}

// The transpose of an 8x8 matrix of 16-bit pairs held as an mma fragment (lane gid * 4 + tig
// holds row gid, columns 2 tig and 2 tig + 1): afterwards it holds the same of the transpose.
__device__ __forceinline__ std::uint32_t movmatrix_trans(std::uint32_t x) {
  std::uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Two floats as a packed 16-bit pair, the first in the low half.
template <class T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
}

// The power of two by which values whose largest magnitude is amax are divided to lie below
// 2^15, inside f16's range with room to spare (0 when they already do): fp8 caches are
// multiplied in f16 whatever q's dtype.
__device__ __forceinline__ int f16_range_shift(float amax) {
  int e = 0;
  frexpf(amax, &e);  // amax < 2^e
  return max(0, e - 15);
}

// q of a warp's 16 rows as mma A fragments: qf[k-step][row r][dims d, d+1, d+8, d+9] of rows
// gid and gid + 8, packed into T pairs. For fp8 caches (kFp8) the tensor cores multiply in f16
// whatever q's dtype, so q is first scaled by a power of two that keeps the warp's largest |q|
// below 2^15 (exact); s_mul, the logit scale, takes the inverse.
template <class T, int kD, bool kFp8>
__device__ __forceinline__ void pack_q_fragments(float (&qf)[kD / 16][2][4], float& s_mul,
                                                 std::uint32_t (&qa)[kD / 16][4]) {
  if constexpr (kFp8) {
    float amax = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(qf[kk][i / 4][i % 4]));
    for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const int shift = f16_range_shift(amax);
    s_mul = ldexpf(s_mul, shift);
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 8; ++i) qf[kk][i / 4][i % 4] = ldexpf(qf[kk][i / 4][i % 4], -shift);
  }
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    qa[kk][0] = pack2<T>(qf[kk][0][0], qf[kk][0][1]);
    qa[kk][1] = pack2<T>(qf[kk][1][0], qf[kk][1][1]);
    qa[kk][2] = pack2<T>(qf[kk][0][2], qf[kk][0][3]);
    qa[kk][3] = pack2<T>(qf[kk][1][2], qf[kk][1][3]);
  }
}

// 2^x by the MUFU unit alone (ex2.approx.ftz: relative error ~2^-22, denormal results flushed
// to zero, 2^-inf = 0): exp2f adds a range fix-up per call that doubles the softmax's cost.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace pagedattn::cuda
