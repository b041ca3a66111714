// Hopper wgmma prefill kernels for a fp8 e4m3 cache (widened to f16; bf16 or f16 q; rows of 64, 128 or 256 dims).
#include "cuda/prefill_wgmma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_prefill_wgmma<Fp8E4M3>(const PrefillKernelParams&, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
