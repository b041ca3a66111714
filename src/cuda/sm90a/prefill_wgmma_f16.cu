// Hopper wgmma prefill kernels for a f16 cache and f16 q (rows of 64, 128 or 256 dims; K/V rows or vLLM's transposed V).
#include "cuda/prefill_wgmma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_prefill_wgmma<__half>(const PrefillKernelParams&, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
