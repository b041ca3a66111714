// Paged prefill on CUDA: which problems the tensor-core kernel covers, and its launch.
#include <algorithm>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/kv_rows.h"
#include "cuda/prefill.h"
#include "cuda/prefill_mma_kernel.cuh"
#include "cuda/prefill_mma_launch.h"

namespace pagedattn::cuda {

std::string prefill_unsupported(const detail::AttentionProblem& p) {
  const DType kv = p.kv.dtype, q = p.qo.q_dtype;
  const bool q16 = q == DType::kBF16 || q == DType::kF16;
  if (!q16 || !(kv == q || is_fp8(kv))) {
    return std::string("prefill on CUDA needs a bf16 or f16 q with a cache of q's dtype or of fp8, got q ") +
           std::string(to_string(q)) + " and a " + std::string(to_string(kv)) + " cache";
  }
  if (p.head_dim != 64 && p.head_dim != 128) {
    return "prefill on CUDA supports head_dim 64 and 128, got " + std::to_string(p.head_dim);
  }
  const std::int64_t chunk = is_fp8(kv) ? 16 : 8;  // elements per 16-byte copy
  if (!rows_vectorisable(p.kv.k, kv, chunk) || !rows_vectorisable(p.kv.v, kv, chunk)) {
    return "prefill on CUDA needs K and V rows in 16-byte aligned runs (NHD or HND layouts; "
           "vLLM's split V layout is token-contiguous)";
  }
  constexpr std::int64_t k31 = std::int64_t{1} << 31;
  if (p.kv.k.page_stride >= k31 || p.kv.v.page_stride >= k31 || p.kv.k.token_stride >= k31 ||
      p.kv.v.token_stride >= k31) {
    return "prefill on CUDA needs page and token strides below 2^31 elements";
  }
  if (p.num_seqs > 65535) {
    return "prefill on CUDA supports at most 65535 sequences per call, got " + std::to_string(p.num_seqs);
  }
  return {};
}

std::int64_t prefill_tile_keys() { return PrefillSmem<__nv_bfloat16, 128>::kKeys; }
std::int64_t prefill_rows_per_cta() { return PrefillSmem<__nv_bfloat16, 128>::kRows; }
std::int64_t prefill_ctas_per_sm(int device) {
  // The kernel uses up to 255 registers per thread; its shared memory is PrefillSmem::kBytes.
  int regs = 0, smem = 0;
  check_cuda(cudaDeviceGetAttribute(&regs, cudaDevAttrMaxRegistersPerMultiprocessor, device), "registers per SM");
  check_cuda(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device), "shared memory per SM");
  constexpr std::int64_t kSmemPerCta = PrefillSmem<__nv_bfloat16, 128>::kBytes + 1024;  // + the CTA's reserve
  const std::int64_t by_regs = regs / (kPrefillThreads * 256), by_smem = smem / kSmemPerCta;
  return std::max<std::int64_t>(1, std::min(by_regs, by_smem));
}

void prefill(const detail::AttentionProblem& p, std::int64_t max_q, void* stream_ptr, const PrefillSplit& split) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.num_seqs == 0 || max_q == 0) return;
  const std::string why = prefill_unsupported(p);
  check_supported(why.empty(), why);
  check_arg(split.splits >= 1 && p.num_kv_heads * split.splits <= 65535 &&
                (split.splits == 1 || split.split_tokens % prefill_tile_keys() == 0),
            "prefill: bad KV split");
  PrefillKernelParams prm;
  prm.p = p;
  prm.page_div = FastDiv::make(static_cast<std::uint32_t>(p.kv.page_size));
  prm.q_index = split.q_index;
  prm.split_tokens = split.splits > 1 ? split.split_tokens : 0;
  prm.out_split_stride = split.out_split_stride;
  prm.lse_split_stride = split.lse_split_stride;
  const std::int64_t rows = prefill_rows_per_cta();
  const std::int64_t tiles = (max_q * p.group_size() + rows - 1) / rows;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.num_kv_heads * split.splits),
                  static_cast<unsigned>(p.num_seqs));
  const int d = static_cast<int>(p.head_dim);
  switch (p.kv.dtype) {
    case DType::kBF16: launch_paged_prefill_mma<__nv_bfloat16, __nv_bfloat16>(prm, d, grid, stream); break;
    case DType::kF16: launch_paged_prefill_mma<__half, __half>(prm, d, grid, stream); break;
    case DType::kF8E4M3: launch_paged_prefill_mma<Fp8E4M3, __half>(prm, d, grid, stream); break;
    default: launch_paged_prefill_mma<Fp8E5M2, __half>(prm, d, grid, stream); break;
  }
  check_launch("paged_prefill_mma_kernel", stream);
}

}  // namespace pagedattn::cuda
