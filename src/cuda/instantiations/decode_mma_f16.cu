// Tensor-core GQA decode kernels for a f16 cache and f16 q (every head_dim up to 256, zero-padded between the 64, 128 and 256 kernels; V rows or, without TMA, vLLM's transposed V).
#include "cuda/decode_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_decode_mma<__half, __half>(const DecodeKernelParams&, int, bool, bool, bool, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
