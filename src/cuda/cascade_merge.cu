// Folding the cascade's partial states. Unlike merge_states (which reproduces the CPU backend's
// arithmetic bit for bit, with double-precision exponentials and any dtype or stride), this
// knows its input: contiguous f32 states written by the cascade's own launches, merged as
// decode merges its KV splits (merge_partials.cuh), one CTA per (sequence, head).
#include "cuda/cascade_merge.h"

#include "core/problem.h"
#include "cuda/cuda_check.h"
#include "cuda/merge_partials.cuh"

namespace pagedattn::cuda {

namespace {

constexpr int kMaxDims = 2 * kMergeThreads;

struct FoldParams {
  CascadeStates states;
  const float* sinks = nullptr;
  CascadeOutput out;
  std::int64_t num_heads = 0;
  int head_dim = 0;
};

// CTA b folds (sequence b / num_heads, head b % num_heads).
__global__ void __launch_bounds__(kMergeThreads) fold_cascade_kernel(const __grid_constant__ FoldParams prm) {
  const std::int64_t H = prm.num_heads, D = prm.head_dim;
  const std::int64_t s = blockIdx.x / H, h = blockIdx.x % H;
  const std::int64_t n = prm.states.count;
  PartialRows in;
  in.v = prm.states.v + (s * n * H + h) * D;  // state i at + i * H * D
  in.lse = prm.states.lse + s * n * H + h;    // state i at [i * H]
  in.v_step = H * D;
  in.lse_step = H;
  in.count = n;
  in.lse_to_log2 = kLog2e;
  const CascadeOutput& out = prm.out;
  MergedRow row;
  row.v = out.v + (s * out.v_row_stride + h * out.v_head_stride) * static_cast<std::int64_t>(dtype_size(out.dtype));
  row.dtype = out.dtype;
  row.lse = out.lse ? out.lse + s * out.lse_row_stride + h * out.lse_head_stride : nullptr;
  merge_partial_rows(in, prm.sinks ? prm.sinks[h] * kLog2e : detail::kNegInf, static_cast<int>(D), row);
}

}  // namespace

void fold_cascade_states(const CascadeStates& states, const float* sinks, const CascadeOutput& out,
                         std::int64_t num_seqs, std::int64_t num_heads, std::int64_t head_dim, void* stream) {
  check_supported(head_dim <= kMaxDims, "cascade_decode on CUDA: head_dim must be at most 256");
  FoldParams prm;
  prm.states = states;
  prm.sinks = sinks;
  prm.out = out;
  prm.num_heads = num_heads;
  prm.head_dim = static_cast<int>(head_dim);
  const std::int64_t pairs = num_seqs * num_heads;
  if (pairs == 0) return;
  check_supported(pairs < (std::int64_t{1} << 31), "cascade_decode on CUDA: too many (sequence, head) pairs");
  auto s = static_cast<cudaStream_t>(stream);
  fold_cascade_kernel<<<static_cast<unsigned>(pairs), kMergeThreads, 0, s>>>(prm);
  check_launch("fold_cascade_kernel", s);
}

}  // namespace pagedattn::cuda
