// Internal: the tensor-core prefill launchers (defined in prefill_mma_kernel.cuh, instantiated
// in instantiations/prefill_mma_*.cu). KV: cache storage type (T, or fp8 with T = f16); T: the
// 16-bit type the tensor cores multiply.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace pagedattn::cuda {
struct PrefillKernelParams;
template <class KV, class T>
void launch_paged_prefill_mma(const PrefillKernelParams& prm, int head_dim, dim3 grid, cudaStream_t stream);
// Compiled only in instantiations/ (prefill.cu sees the definitions and must not compile the
// kernels again).
struct Fp8E4M3;
struct Fp8E5M2;
extern template void launch_paged_prefill_mma<__nv_bfloat16, __nv_bfloat16>(const PrefillKernelParams&, int, dim3, cudaStream_t);
extern template void launch_paged_prefill_mma<__half, __half>(const PrefillKernelParams&, int, dim3, cudaStream_t);
extern template void launch_paged_prefill_mma<Fp8E4M3, __half>(const PrefillKernelParams&, int, dim3, cudaStream_t);
extern template void launch_paged_prefill_mma<Fp8E5M2, __half>(const PrefillKernelParams&, int, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
