// Hopper wgmma prefill kernels for a fp8 e5m2 cache (widened to f16; bf16 or f16 q; rows of 64, 128 or 256 dims).
#include "cuda/prefill_wgmma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_prefill_wgmma<Fp8E5M2>(const PrefillKernelParams&, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
