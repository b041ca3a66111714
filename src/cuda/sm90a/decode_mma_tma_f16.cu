// Tensor-core GQA decode kernels whose f16 K/V tiles come as TMA boxes (every head_dim up to 256, zero-padded between the 64, 128 and 256 kernels).
#include "cuda/decode_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_decode_mma<__half, __half, true>(const DecodeKernelParams&, int, bool, bool, bool, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
