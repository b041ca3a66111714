// Tensor-core prefill kernels for a fp8 e5m2 cache (multiplied in f16) (head_dim 64 and 128).
#include "cuda/prefill_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_prefill_mma<Fp8E5M2, __half>(const PrefillKernelParams&, int, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
