// Tensor-core GQA decode kernels for a bf16 cache and bf16 q (head_dim 64 and 128).
#include "cuda/decode_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_decode_mma<__nv_bfloat16, __nv_bfloat16>(const DecodeKernelParams&, int, bool, bool, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
