// Hopper wgmma prefill kernels for a f16 cache and f16 q (head_dim 128).
#include "cuda/prefill_wgmma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_prefill_wgmma<__half>(const PrefillKernelParams&, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
