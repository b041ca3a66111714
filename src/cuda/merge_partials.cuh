// Internal (CUDA): one (sequence, head)'s f32 partial attention states merged into its output.
// Shared by decode's split-K merge (states: the KV splits, LSEs in base 2) and the cascade's
// final fold (states: levels and their KV splits, natural-log LSEs, empty ones at -inf).
#pragma once

#include <cstdint>

#include "cuda/decode_kernel.cuh"

namespace pagedattn::cuda {

// The CTA size merge_partial_rows is written for: thread t owns dims t and t + kMergeThreads.
constexpr int kMergeThreads = 128;

// State i's f32 row (head_dim values) at v + i * v_step and its LSE at lse[i * lse_step]; an
// LSE of -inf marks an empty state, whose row may hold anything and is not used.
struct PartialRows {
  const float* v = nullptr;
  const float* lse = nullptr;
  std::int64_t v_step = 0, lse_step = 0;
  std::int64_t count = 0;
  float lse_to_log2 = 1.0f;  // kLog2e when the LSEs are natural logs
};

// The merged row: head_dim values of `dtype` at `v`, and (optional) its natural-log LSE.
struct MergedRow {
  std::byte* v = nullptr;
  DType dtype = DType::kF32;
  float* lse = nullptr;
};

// Every thread of a kMergeThreads CTA calls it for the same (sequence, head); head_dim <= 256.
// sink: the head's sink logit in base 2, or -inf. The rows of a block of 32 states load
// together, the first block's alongside the LSEs (before their maximum is known), so merging up
// to 32 states takes one round trip to L2.
__device__ __forceinline__ void merge_partial_rows(const PartialRows& in, float sink, int D, const MergedRow& out) {
  constexpr int kWarps = kMergeThreads / 32, kBlock = 32;
  constexpr float kNegInf = detail::kNegInf;
  const int t = threadIdx.x, lane = t & 31;
  const int d0 = t, d1 = t + kMergeThreads;
  const std::int64_t n = in.count;
  __shared__ float s_red[kWarps];
  __shared__ float s_w[kBlock];
  float v0[kBlock], v1[kBlock];
  auto load_block = [&](std::int64_t b) {
#pragma unroll
    for (int i = 0; i < kBlock; ++i) {
      const float* row = in.v + (b + i) * in.v_step;
      const bool live = b + i < n;
      v0[i] = live && d0 < D ? row[d0] : 0.0f;
      v1[i] = live && d1 < D ? row[d1] : 0.0f;
    }
  };
  load_block(0);
  // Max of the states' LSEs (base 2), with the sink as one more term.
  float M = sink;
  for (std::int64_t i = t; i < n; i += kMergeThreads) M = fmaxf(M, in.lse[i * in.lse_step] * in.lse_to_log2);
  for (int off = 16; off > 0; off /= 2) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
  if (lane == 0) s_red[t >> 5] = M;
  __syncthreads();
  M = s_red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) M = fmaxf(M, s_red[w]);
  float L = 0.0f, o0 = 0.0f, o1 = 0.0f;
  if (M != kNegInf) {
    for (std::int64_t b = 0; b < n; b += kBlock) {
      if (b > 0) load_block(b);
      if (t < kBlock) s_w[t] = b + t < n ? exp2f(in.lse[(b + t) * in.lse_step] * in.lse_to_log2 - M) : 0.0f;
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kBlock; ++i) {
        const float w = s_w[i];
        L += w;
        o0 = w != 0.0f ? fmaf(w, v0[i], o0) : o0;  // an empty state's row may be NaN
        o1 = w != 0.0f ? fmaf(w, v1[i], o1) : o1;
      }
      __syncthreads();  // s_w is refilled
    }
    if (sink != kNegInf) L += exp2f(sink - M);
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  if (d0 < D) store_one(out.v, out.dtype, d0, o0 * inv);
  if (d1 < D) store_one(out.v, out.dtype, d1, o1 * inv);
  if (t == 0 && out.lse) *out.lse = natural_lse(M, L);
}

}  // namespace pagedattn::cuda
