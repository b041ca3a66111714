// Internal: the tensor-core GQA decode launchers (defined in decode_mma_kernel.cuh,
// instantiated in instantiations/decode_mma_*.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace pagedattn::cuda {
struct DecodeKernelParams;
template <class KV>
void launch_paged_decode_mma(const DecodeKernelParams& prm, int head_dim, dim3 grid, cudaStream_t stream);
}  // namespace pagedattn::cuda
