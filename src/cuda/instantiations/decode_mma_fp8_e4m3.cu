// Tensor-core GQA decode kernels for a fp8_e4m3 cache (widened to f16; head_dim 64 and 128).
#include "cuda/decode_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_decode_mma<Fp8E4M3, __half>(const DecodeKernelParams&, int, bool, bool, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
