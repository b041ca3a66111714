// Internal (CUDA, sm_90a): Hopper's warpgroup MMA (wgmma), register budgets and named
// barriers. Compiled only for the sm_90a target (wgmma and setmaxnreg exist nowhere else).
// Shared-memory operands use the 128-byte swizzle of async_copy.cuh, whose barriers pace a
// producer warpgroup against its consumers.
#pragma once

#include "cuda/async_copy.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace pagedattn::cuda::sm90 {

// A wgmma shared-memory matrix descriptor with the 128-byte swizzle: start address, leading
// and stride byte offsets (all in 16-byte units). K-major operands (the reduction dimension
// contiguous: Q, K) ignore the leading offset and step 1024 bytes per 8 rows; MN-major ones
// (V as the B of P V: keys are the reduction) step `leading` bytes per 64 columns and 1024 per
// 8 keys. `stride` (the step per 8 rows or keys) is 1024 where the 8-row atoms lie back to back.
__device__ __forceinline__ std::uint64_t swizzled_descriptor(std::uint32_t address, std::uint32_t leading,
                                                             std::uint32_t stride = 1024) {
  return static_cast<std::uint64_t>((address & 0x3FFFF) >> 4) | (static_cast<std::uint64_t>(leading >> 4) << 16) |
         (static_cast<std::uint64_t>(stride >> 4) << 32) | (std::uint64_t{1} << 62);
}

// desc moved `bytes` (a multiple of 16) further into shared memory. The start address is the
// low 14 bits in 16-byte units and shared addresses stay below 256 KB, so the add never carries
// out of the field: a tile's descriptors are one descriptor plus constants.
__device__ __forceinline__ std::uint64_t advanced(std::uint64_t desc, std::uint32_t bytes) { return desc + (bytes >> 4); }

// The 64 accumulator registers of an m64n128 tile, spelled out: inline PTX names every operand.
#define PAGEDATTN_WGMMA_M64N128K16(TYPE, A_OPERAND, TRANSPOSE, ...)                         \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %65, 0;\n"                                      \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"                  \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
      "}, " A_OPERAND ", %64, p, 1, 1" TRANSPOSE ";\n}\n"                                 \
      :                                                                                \
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
      : __VA_ARGS__)

// The 32 accumulator registers of an m64n64 tile.
#define PAGEDATTN_WGMMA_M64N64K16(TYPE, A_OPERAND, TRANSPOSE, ...)                          \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %33, 0;\n"                                      \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {"                   \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
      "}, " A_OPERAND ", %32, p, 1, 1" TRANSPOSE ";\n}\n"                                 \
      :                                                                                \
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
      : __VA_ARGS__)

// d (64 x N, f32) (+)= A (64 x 16, shared, K-major) B (16 x N, shared, K-major), N = 128 or 64
// (d's registers: N / 2); d is overwritten when accumulate is 0.
template <class T>
__device__ __forceinline__ void wgmma_ss(float (&d)[64], std::uint64_t a_desc, std::uint64_t b_desc, int accumulate) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    PAGEDATTN_WGMMA_M64N128K16("bf16", "%66", ", 0, 0", "l"(b_desc), "r"(accumulate), "l"(a_desc));
  } else {
    PAGEDATTN_WGMMA_M64N128K16("f16", "%66", ", 0, 0", "l"(b_desc), "r"(accumulate), "l"(a_desc));
  }
}

template <class T>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], std::uint64_t a_desc, std::uint64_t b_desc, int accumulate) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    PAGEDATTN_WGMMA_M64N64K16("bf16", "%34", ", 0, 0", "l"(b_desc), "r"(accumulate), "l"(a_desc));
  } else {
    PAGEDATTN_WGMMA_M64N64K16("f16", "%34", ", 0, 0", "l"(b_desc), "r"(accumulate), "l"(a_desc));
  }
}

// d (64 x N, f32) += A (64 x 16, registers: the m16n8k16 A fragment of each warp's 16 rows)
// B (16 x N, shared), N = 128 or 64 (d's registers: N / 2). B is MN-major (N contiguous: V as
// rows of keys) unless kBKMajor (the 16 reduction elements contiguous: V stored dims-major, as
// vLLM's split layout has it).
#define PAGEDATTN_WGMMA_RS(N_MACRO, FIRST_A, TRANSPOSE)                                                   \
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {                                                     \
    N_MACRO("bf16", FIRST_A, TRANSPOSE, "l"(b_desc), "r"(1), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])); \
  } else {                                                                                              \
    N_MACRO("f16", FIRST_A, TRANSPOSE, "l"(b_desc), "r"(1), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]));  \
  }
template <class T, bool kBKMajor = false>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b_desc) {
  if constexpr (kBKMajor) {
    PAGEDATTN_WGMMA_RS(PAGEDATTN_WGMMA_M64N128K16, "{%66, %67, %68, %69}", ", 0")
  } else {
    PAGEDATTN_WGMMA_RS(PAGEDATTN_WGMMA_M64N128K16, "{%66, %67, %68, %69}", ", 1")
  }
}
template <class T, bool kBKMajor = false>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t b_desc) {
  if constexpr (kBKMajor) {
    PAGEDATTN_WGMMA_RS(PAGEDATTN_WGMMA_M64N64K16, "{%34, %35, %36, %37}", ", 0")
  } else {
    PAGEDATTN_WGMMA_RS(PAGEDATTN_WGMMA_M64N64K16, "{%34, %35, %36, %37}", ", 1")
  }
}
#undef PAGEDATTN_WGMMA_RS

#undef PAGEDATTN_WGMMA_M64N128K16
#undef PAGEDATTN_WGMMA_M64N64K16

// Before the first wgmma that reads registers written by ordinary instructions.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving reads or writes of wgmma operands across a wgmma wait.
template <int kN>
__device__ __forceinline__ void fence_registers(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void fence_registers(std::uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// Per-warpgroup register budgets (need a register cap at entry: __launch_bounds__(n, 1)).
template <int kRegs>
__device__ __forceinline__ void shrink_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void grow_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// A barrier among `threads` threads of the CTA (id 0 is __syncthreads'): wait for it, or
// only arrive.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace pagedattn::cuda::sm90
