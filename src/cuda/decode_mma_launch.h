// Internal: the tensor-core GQA decode launchers (defined in decode_mma_kernel.cuh,
// instantiated in instantiations/decode_mma_*.cu). KV: cache storage type (T, or fp8 with T = f16);
// T: q's 16-bit dtype, the type the tensor cores multiply; kTma: the Hopper variant whose tiles
// come as TMA boxes (KV = T, or fp8 at head_dim 128 with key rows and V rows; needs prm.k_tiles /
// v_tiles, an sm_90 device, and pages of a multiple of 16 slots; instantiated only in the sm_90a
// objects, PAGEDATTN_WITH_SM90A);
// pair_steps: two tiles per softmax step (the TMA kernel only; fp8 always, 16-bit cp.async never);
// wide: four warps per CTA instead of two (the TMA kernel), or three (fp8 with key rows at
// head_dim 128 and V rows); key_rows: the transposed
// products, keys as the MMA's rows and 8 heads as its columns (groups of at most 8: prm's head
// tiles of 8). head_dim picks the 64, 128 or 256 kernel (zero-padded below it);
// prm.v_transposed the cp.async kernel's transposed V tiles.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pagedattn::cuda {
struct DecodeKernelParams;
// The head dim of the tensor-core decode kernel that runs `head_dim` (64, 128 or 256: the
// smallest that holds it, zero-padded above it). The launcher dispatches on it; the planner and
// the fp8 warp rule ask it which kernel a problem gets.
constexpr int mma_kernel_dim(std::int64_t head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }
// Whether an fp8 cache's kernel comes in three-warp CTAs (`wide`): the 128-dim one with key rows
// and V rows (kVInRegs). The launcher dispatches on it; the caller asks it for the launch report.
constexpr bool fp8_kernel_has_wide_ctas(std::int64_t head_dim, bool key_rows, bool v_transposed) {
  return key_rows && !v_transposed && mma_kernel_dim(head_dim) == 128;
}
// Whether an fp8 cache's kernel can take TMA tiles: the same one (kVInRegs), unpadded.
constexpr bool fp8_kernel_takes_tma_tiles(std::int64_t head_dim, bool key_rows, bool v_transposed) {
  return fp8_kernel_has_wide_ctas(head_dim, key_rows, v_transposed) && head_dim == 128;
}
template <class KV, class T, bool kTma = false>
void launch_paged_decode_mma(const DecodeKernelParams& prm, int head_dim, bool pair_steps, bool wide, bool key_rows,
                             dim3 grid, cudaStream_t stream);

// Compiled only where instantiated: decode.cu sees the definitions (it includes
// decode_mma_kernel.cuh for the kernels' shapes) and must not compile the kernels again, and the
// TMA ones exist only for sm_90a (a build for sm_80 or sm_89 could not compile them at all).
struct Fp8E4M3;
struct Fp8E5M2;
#define PAGEDATTN_DECODE_MMA_LAUNCHER(KV, T, TMA)                                                          \
  extern template void launch_paged_decode_mma<KV, T, TMA>(const DecodeKernelParams&, int, bool, bool, bool, \
                                                           dim3, cudaStream_t);
PAGEDATTN_DECODE_MMA_LAUNCHER(__nv_bfloat16, __nv_bfloat16, false)
PAGEDATTN_DECODE_MMA_LAUNCHER(__half, __half, false)
PAGEDATTN_DECODE_MMA_LAUNCHER(Fp8E4M3, __half, false)
PAGEDATTN_DECODE_MMA_LAUNCHER(Fp8E5M2, __half, false)
PAGEDATTN_DECODE_MMA_LAUNCHER(__nv_bfloat16, __nv_bfloat16, true)
PAGEDATTN_DECODE_MMA_LAUNCHER(__half, __half, true)
PAGEDATTN_DECODE_MMA_LAUNCHER(Fp8E4M3, __half, true)
PAGEDATTN_DECODE_MMA_LAUNCHER(Fp8E5M2, __half, true)
#undef PAGEDATTN_DECODE_MMA_LAUNCHER
}  // namespace pagedattn::cuda
