// Tensor-core prefill kernels for a fp8 e5m2 cache (multiplied in f16; rows of 64, 128 or 256 dims).
#include "cuda/prefill_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_prefill_mma<Fp8E5M2, __half>(const PrefillKernelParams&, int, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
