// Tensor-core GQA decode kernels for a fp8_e4m3 cache (widened to f16; every head_dim up to 256, zero-padded between the 64, 128 and 256 kernels; V rows or vLLM's transposed V).
#include "cuda/decode_mma_kernel.cuh"

namespace pagedattn::cuda {
template void launch_paged_decode_mma<Fp8E4M3, __half>(const DecodeKernelParams&, int, bool, bool, bool, dim3, cudaStream_t);
}  // namespace pagedattn::cuda
