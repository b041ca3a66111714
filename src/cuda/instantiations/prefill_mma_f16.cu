// Tensor-core prefill kernels for a f16 cache and f16 q (head_dim 64 and 128).
#include "cuda/prefill_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_prefill_mma<__half, __half>(const PrefillKernelParams&, int, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
