// Tensor-core prefill kernels for a bf16 cache and bf16 q (rows of 64, 128 or 256 dims).
#include "cuda/prefill_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_prefill_mma<__nv_bfloat16, __nv_bfloat16>(const PrefillKernelParams&, int, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
