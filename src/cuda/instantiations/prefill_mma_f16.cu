// Tensor-core prefill kernels for a f16 cache and f16 q (rows of 64, 128 or 256 dims).
#include "cuda/prefill_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_prefill_mma<__half, __half>(const PrefillKernelParams&, int, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
