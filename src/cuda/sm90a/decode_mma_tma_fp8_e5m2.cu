// Tensor-core GQA decode kernel whose fp8_e5m2 K/V tiles come as TMA boxes (head_dim 128, key rows: groups of at most 8).
#include "cuda/decode_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_decode_mma<Fp8E5M2, __half, true>(const DecodeKernelParams&, int, bool, bool, bool, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
