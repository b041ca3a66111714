// Paged decode kernels for a bf16 KV cache (every head_dim bucket and query-head tile).
#include "cuda/decode_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_decode<__nv_bfloat16>(const DecodeKernelParams&, int, int, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
