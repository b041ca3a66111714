// Internal: the tensor-core GQA decode launchers (defined in decode_mma_kernel.cuh,
// instantiated in instantiations/decode_mma_*.cu). KV: cache storage type (T, or fp8 with T = f16);
// T: q's 16-bit dtype, the type the tensor cores multiply.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace pagedattn::cuda {
struct DecodeKernelParams;
template <class KV, class T>
void launch_paged_decode_mma(const DecodeKernelParams& prm, int head_dim, dim3 grid, cudaStream_t stream);
}  // namespace pagedattn::cuda
