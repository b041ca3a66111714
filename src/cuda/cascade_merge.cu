// Folding the cascade's partial states. Unlike merge_states (which reproduces the CPU backend's
// arithmetic bit for bit, with double-precision exponentials and any dtype or stride), this
// knows its input: contiguous f32 states written by the cascade's own launches. It is one short
// loop per (sequence, head) warp, so the kernel is small: a warp runs its code about once, and
// the general merge's larger code spent most of its time waiting for instructions.
#include "cuda/cascade_merge.h"

#include "core/problem.h"
#include "cuda/cuda_check.h"
#include "cuda/decode_kernel.cuh"

namespace pagedattn::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxDims = 256;
constexpr int kChunk = 16;  // states whose rows load together

struct FoldParams {
  CascadeStates states;
  const float* sinks = nullptr;
  CascadeOutput out;
  std::int64_t num_pairs = 0, num_heads = 0;
  int head_dim = 0;
};

// One warp per (sequence, head); lane l owns dims [4 l, 4 l + 4) and [128 + 4 l, 128 + 4 l + 4).
// kHalves: 128-dim halves of a row (1 for head_dim <= 128, else 2).
template <int kHalves>
__global__ void __launch_bounds__(kThreads) fold_cascade_kernel(const __grid_constant__ FoldParams prm) {
  const std::int64_t pair = blockIdx.x * std::int64_t{kWarps} + threadIdx.x / 32;
  if (pair >= prm.num_pairs) return;
  const int lane = threadIdx.x & 31, D = prm.head_dim;
  const std::int64_t s = pair / prm.num_heads, h = pair % prm.num_heads, H = prm.num_heads;
  const std::int64_t n = prm.states.count;
  const float* lse = prm.states.lse + s * n * H + h;  // state i at lse[i * H]
  const float* v = prm.states.v + (s * n * H + h) * D;  // state i at v[i * H * D]
  // Which gathered levels this sequence is not a user of: their states were never written.
  const CascadeStates& st = prm.states;
  const unsigned absent = __ballot_sync(0xffffffffu, lane < st.num_gathered && st.gathered[lane & 15].map[s] < 0);
  auto state_lse = [&](std::int64_t i) {
    for (int g = 0; g < st.num_gathered; ++g) {
      if ((absent >> g & 1u) && i >= st.gathered[g].first && i < st.gathered[g].first + st.gathered[g].count) {
        return detail::kNegInf;
      }
    }
    return lse[i * H];
  };
  // Lane k takes states k, k + 32, ...: their LSEs load in parallel, the base-2 maximum over
  // them and the sink is a butterfly.
  float m = prm.sinks ? prm.sinks[h] * kLog2e : detail::kNegInf;
  for (std::int64_t i = lane; i < n; i += 32) m = fmaxf(m, state_lse(i) * kLog2e);
#pragma unroll
  for (int step = 16; step > 0; step /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, step));
  float acc[kHalves][4] = {};
  float l = 0.0f;  // this lane's states' weights, summed over the warp below
  if (m != detail::kNegInf) {
    for (std::int64_t c0 = 0; c0 < n; c0 += 32) {
      const float x = c0 + lane < n ? state_lse(c0 + lane) : detail::kNegInf;
      const float w_lane = x == detail::kNegInf ? 0.0f : exp2f(x * kLog2e - m);
      l += w_lane;
      const int in_chunk = static_cast<int>(n - c0 < 32 ? n - c0 : 32);
      // kChunk states' rows in flight at once, their weights broadcast from their lanes.
#pragma unroll 1
      for (int k0 = 0; k0 < in_chunk; k0 += kChunk) {
        float w[kChunk];
        float4 x4[kChunk][kHalves];
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
          w[c] = __shfl_sync(0xffffffffu, w_lane, (k0 + c) & 31);
          if (k0 + c >= in_chunk) w[c] = 0.0f;
#pragma unroll
          for (int half = 0; half < kHalves; ++half) {
            const int d = half * 128 + 4 * lane;
            x4[c][half] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            // An empty state's value is never read (it may be anything).
            if (d < D && w[c] != 0.0f) x4[c][half] = *reinterpret_cast<const float4*>(v + (c0 + k0 + c) * H * D + d);
          }
        }
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
#pragma unroll
          for (int half = 0; half < kHalves; ++half) {
            acc[half][0] = fmaf(w[c], x4[c][half].x, acc[half][0]);
            acc[half][1] = fmaf(w[c], x4[c][half].y, acc[half][1]);
            acc[half][2] = fmaf(w[c], x4[c][half].z, acc[half][2]);
            acc[half][3] = fmaf(w[c], x4[c][half].w, acc[half][3]);
          }
        }
      }
    }
#pragma unroll
    for (int step = 16; step > 0; step /= 2) l += __shfl_xor_sync(0xffffffffu, l, step);
    if (prm.sinks) l += exp2f(prm.sinks[h] * kLog2e - m);
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  const CascadeOutput& out = prm.out;
  std::byte* o_row = out.v + (s * out.v_row_stride + h * out.v_head_stride) * static_cast<std::int64_t>(dtype_size(out.dtype));
#pragma unroll
  for (int half = 0; half < kHalves; ++half) {
    const int d = half * 128 + 4 * lane;
    if (d >= D) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) store_one(o_row, out.dtype, d + j, acc[half][j] * inv);
  }
  if (lane == 0 && out.lse) {
    out.lse[s * out.lse_row_stride + h * out.lse_head_stride] = natural_lse(m, l);
  }
}

}  // namespace

void fold_cascade_states(const CascadeStates& states, const float* sinks, const CascadeOutput& out,
                         std::int64_t num_seqs, std::int64_t num_heads, std::int64_t head_dim, void* stream) {
  check_supported(head_dim % 4 == 0 && head_dim <= kMaxDims,
                  "cascade_decode on CUDA: head_dim must be a multiple of 4 and at most 256");
  FoldParams prm;
  prm.states = states;
  prm.sinks = sinks;
  prm.out = out;
  prm.num_pairs = num_seqs * num_heads;
  prm.num_heads = num_heads;
  prm.head_dim = static_cast<int>(head_dim);
  if (prm.num_pairs == 0) return;
  const std::int64_t blocks = (prm.num_pairs + kWarps - 1) / kWarps;
  auto s = static_cast<cudaStream_t>(stream);
  if (head_dim <= 128) fold_cascade_kernel<1><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(prm);
  else fold_cascade_kernel<2><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(prm);
  check_launch("fold_cascade_kernel", s);
}

}  // namespace pagedattn::cuda
