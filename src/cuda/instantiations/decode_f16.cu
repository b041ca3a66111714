// Paged decode kernels for a f16 KV cache (every head_dim bucket and query-head tile).
#include "cuda/decode_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_decode<__half>(const DecodeKernelParams&, int, int, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
