// merge_state / merge_states on CUDA.
//
// One warp merges one (row, head): every lane reads the states' LSEs (a few floats, broadcast),
// then owns runs of 8 dims, loaded as one vector per state when aligned. The arithmetic is the
// CPU backend's (src/cpu/merge_states.cpp), operation for operation: m = max LSE (ignoring NaN
// like std::max), w_i = exp(lse_i - m) (0 for an empty state), acc += w_i * v_i in state order
// with no fused multiply-add, out = acc * (1 / sum w). exp and log are evaluated in double and
// rounded once, which gives the correctly rounded f32 result that the host's expf/logf give, so
// the two backends agree to the last bit but in rare ties.
#include <algorithm>

#include "core/problem.h"
#include "cuda/cuda_check.h"
#include "cuda/element_bits.cuh"
#include "cuda/merge_states.h"

namespace pagedattn::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kPairsPerBlock = kThreads / kWarp;  // (row, head) pairs, one per warp
constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;  // the grid strides beyond this
constexpr int kChunk = 8;  // states whose loads are in flight together

struct MergeParams {
  StateSet sets[kMaxStateSets];
  int num_sets = 0;
  StateOut out;
  std::int64_t num_rows = 0, num_heads = 0, head_dim = 0;
  bool vec = false;  // every v row (inputs and output) moves in aligned runs of 8
};

__device__ __forceinline__ float lse_of(const StateSet& s, std::int64_t i, std::int64_t r, std::int64_t h) {
  return s.lse[r * s.lse_row_stride + i * s.lse_state_stride + h * s.lse_head_stride];
}

// The weight of a state: 0 when it is empty (LSE -inf), else exp(lse - m).
__device__ __forceinline__ float weight_of(float lse, float m) {
  return lse == detail::kNegInf ? 0.0f : static_cast<float>(exp(static_cast<double>(__fsub_rn(lse, m))));
}

__global__ void merge_states_kernel(const __grid_constant__ MergeParams prm) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t pairs = prm.num_rows * prm.num_heads, D = prm.head_dim;
  const StateOut& out = prm.out;
  const int out_size = static_cast<int>(dtype_size(out.dtype));
  for (std::int64_t rh = blockIdx.x * std::int64_t{kPairsPerBlock} + threadIdx.x / kWarp; rh < pairs;
       rh += std::int64_t{gridDim.x} * kPairsPerBlock) {
    const std::int64_t r = rh / prm.num_heads, h = rh % prm.num_heads;
    float m = detail::kNegInf;
    for (int s = 0; s < prm.num_sets; ++s) {
      for (std::int64_t i = 0; i < prm.sets[s].count; ++i) {
        const float l = lse_of(prm.sets[s], i, r, h);
        m = m < l ? l : m;  // std::max(m, l): a NaN l leaves m as it is
      }
    }
    float denom = 0.0f;
    if (m != detail::kNegInf) {
      for (int s = 0; s < prm.num_sets; ++s) {
        for (std::int64_t i = 0; i < prm.sets[s].count; ++i) denom = __fadd_rn(denom, weight_of(lse_of(prm.sets[s], i, r, h), m));
      }
    }
    const float inv = denom > 0.0f ? __fdiv_rn(1.0f, denom) : 0.0f;
    std::byte* o_row = out.v + (r * out.v_row_stride + h * out.v_head_stride) * out_size;
    for (std::int64_t d0 = std::int64_t{lane} * kRun; d0 < D; d0 += kWarp * kRun) {
      const int n = static_cast<int>(D - d0 < kRun ? D - d0 : kRun);
      float acc[kRun] = {};
      if (m != detail::kNegInf) {
        for (int s = 0; s < prm.num_sets; ++s) {
          const StateSet& set = prm.sets[s];
          const int in_size = static_cast<int>(dtype_size(set.dtype));
          // kChunk states at a time: their loads are all in flight before the first add.
          for (std::int64_t i0 = 0; i0 < set.count; i0 += kChunk) {
            float w[kChunk], x[kChunk][kRun];
#pragma unroll
            for (int c = 0; c < kChunk; ++c) {
              const std::int64_t i = i0 + c;
              w[c] = i < set.count ? weight_of(lse_of(set, i, r, h), m) : 0.0f;
#pragma unroll
              for (int j = 0; j < kRun; ++j) x[c][j] = 0.0f;
              if (w[c] == 0.0f) continue;
              const std::byte* v = set.v + (r * set.v_row_stride + i * set.v_state_stride + h * set.v_head_stride) * in_size;
              if (prm.vec) {
                std::uint32_t bits[kRun];
                load_run(v + d0 * in_size, in_size, bits);
#pragma unroll
                for (int j = 0; j < kRun; ++j) x[c][j] = decode_bits(set.dtype, bits[j]);
              } else {
                // Unrolled with a predicate: a loop bound of n would put x in local memory.
#pragma unroll
                for (int j = 0; j < kRun; ++j) {
                  if (j < n) x[c][j] = load_as_float(v, set.dtype, d0 + j);
                }
              }
            }
#pragma unroll
            for (int c = 0; c < kChunk; ++c) {
              if (w[c] == 0.0f) continue;  // empty or past the end: contributes nothing
#pragma unroll
              for (int j = 0; j < kRun; ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(w[c], x[c][j]));
            }
          }
        }
      }
      std::uint32_t bits[kRun];
#pragma unroll
      for (int j = 0; j < kRun; ++j) bits[j] = encode_bits(out.dtype, __fmul_rn(acc[j], inv));
      if (prm.vec) {
        store_run(o_row + d0 * out_size, out_size, bits);
      } else {
#pragma unroll
        for (int j = 0; j < kRun; ++j) {
          if (j < n) store_bits(o_row, out_size, d0 + j, bits[j]);
        }
      }
    }
    if (out.lse != nullptr) {
      __syncwarp();  // lse_out may alias an input LSE: every lane has read it by now
      if (lane == 0) {
        out.lse[r * out.lse_row_stride + h * out.lse_head_stride] =
            denom > 0.0f ? __fadd_rn(m, static_cast<float>(log(static_cast<double>(denom)))) : detail::kNegInf;
      }
    }
  }
}

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace

void merge_states(const StateSet* sets, int num_sets, const StateOut& out, std::int64_t num_rows,
                  std::int64_t num_heads, std::int64_t head_dim, void* stream_ptr) {
  check_arg(num_sets >= 0 && num_sets <= kMaxStateSets, "merge_states: too many state sets");
  const std::int64_t pairs = num_rows * num_heads;
  if (pairs == 0) return;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  MergeParams prm;
  prm.num_sets = num_sets;
  prm.out = out;
  prm.num_rows = num_rows;
  prm.num_heads = num_heads;
  prm.head_dim = head_dim;
  prm.vec = head_dim % kRun == 0 && out.v_row_stride % kRun == 0 && out.v_head_stride % kRun == 0 &&
            aligned(out.v, run_alignment(static_cast<int>(dtype_size(out.dtype))));
  for (int s = 0; s < num_sets; ++s) {
    const StateSet& set = sets[s];
    prm.sets[s] = set;
    prm.vec = prm.vec && set.v_row_stride % kRun == 0 && set.v_state_stride % kRun == 0 &&
              set.v_head_stride % kRun == 0 && aligned(set.v, run_alignment(static_cast<int>(dtype_size(set.dtype))));
  }
  const std::int64_t blocks = std::min((pairs + kPairsPerBlock - 1) / kPairsPerBlock, kMaxBlocks);
  merge_states_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(prm);
  check_launch("merge_states_kernel", stream);
}

}  // namespace pagedattn::cuda
