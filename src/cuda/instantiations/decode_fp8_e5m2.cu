// Paged decode kernels for a fp8_e5m2 KV cache (every head_dim bucket and query-head tile).
#include "cuda/decode_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_decode<Fp8E5M2>(const DecodeKernelParams&, int, int, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
