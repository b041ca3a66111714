// Hopper wgmma prefill kernels for a bf16 cache and bf16 q (rows of 64, 128 or 256 dims; K/V rows or vLLM's transposed V).
#include "cuda/prefill_wgmma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_prefill_wgmma<__nv_bfloat16>(const PrefillKernelParams&, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
