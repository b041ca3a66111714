// merge_state / merge_states on CUDA.
//
// One warp merges one (row, head): lane k reads the LSE of every 32nd state from k and computes
// its weight, then each lane owns runs of 8 dims, loaded as one vector per state when aligned. The arithmetic is the
// CPU backend's (src/cpu/merge_states.cpp), operation for operation: m = max LSE (ignoring NaN
// like std::max), w_i = exp(lse_i - m) (0 for an empty state), acc += w_i * v_i in state order
// with no fused multiply-add, out = acc * (1 / sum w). exp and log are evaluated in double and
// rounded once, which gives the correctly rounded f32 result that the host's expf/logf give, so
// the two backends agree to the last bit but in rare ties.
#include <algorithm>
#include <type_traits>

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
constexpr int kChunk = 4;  // states whose loads are in flight together

struct MergeParams {
  StateSet sets[kMaxStateSets];
  int num_sets = 0;
  StateOut out;
  std::int64_t num_rows = 0, num_heads = 0, head_dim = 0;
  int total_states = 0;  // over all sets
  bool vec = false;  // every v row (inputs and output) moves in aligned runs of 8
};

// State i of the flattened list (set 0's states, then set 1's, ...) of (row r, head h).
struct StateRef {
  const StateSet* set;
  std::int64_t index;
};
__device__ __forceinline__ StateRef state_ref(const MergeParams& prm, std::int64_t i) {
  int s = 0;
  while (s + 1 < prm.num_sets && i >= prm.sets[s].count) i -= prm.sets[s++].count;
  return {&prm.sets[s], i};
}

__device__ __forceinline__ float lse_of(const StateRef& st, std::int64_t r, std::int64_t h) {
  const StateSet& s = *st.set;
  return s.lse[r * s.lse_row_stride + st.index * s.lse_state_stride + h * s.lse_head_stride];
}

// The weight of a state: 0 when it is empty (LSE -inf), else exp(lse - m).
__device__ __forceinline__ float weight_of(float lse, float m) {
  return lse == detail::kNegInf ? 0.0f : static_cast<float>(exp(static_cast<double>(__fsub_rn(lse, m))));
}

// A run's conversions with one branch on the dtype per run (not per element): the kernel's
// code stays small. A warp runs it about once per (row, head), so its size, not its
// arithmetic, sets the time (ncu: an earlier form spent two thirds of its stall cycles waiting
// for instructions). body(dtype) gets f32, f16 and bf16 as constants (their conversions fold
// inline) and the fp8 dtypes as a runtime value.
template <class Body>
__device__ __forceinline__ void visit_run_dtype(DType t, Body&& body) {
  switch (t) {
    case DType::kF32: body(std::integral_constant<DType, DType::kF32>{}); break;
    case DType::kF16: body(std::integral_constant<DType, DType::kF16>{}); break;
    case DType::kBF16: body(std::integral_constant<DType, DType::kBF16>{}); break;
    default: body(t); break;
  }
}
// f(j) for every element j of a run: unrolled for a constant dtype, a plain loop for a runtime
// one (an fp8 conversion inlined eight times would grow the code the same way).
template <class Dt, class F>
__device__ __forceinline__ void for_run(Dt, F&& f) {
  if constexpr (std::is_same_v<Dt, DType>) {
#pragma unroll 1
    for (int j = 0; j < kRun; ++j) f(j);
  } else {
#pragma unroll
    for (int j = 0; j < kRun; ++j) f(j);
  }
}
__device__ __forceinline__ void decode_run(DType t, const std::uint32_t (&b)[kRun], float (&x)[kRun]) {
  visit_run_dtype(t, [&](auto dt) { for_run(dt, [&](int j) { x[j] = decode_bits(dt, b[j]); }); });
}
__device__ __forceinline__ void encode_run(DType t, const float (&x)[kRun], std::uint32_t (&b)[kRun]) {
  visit_run_dtype(t, [&](auto dt) { for_run(dt, [&](int j) { b[j] = encode_bits(dt, x[j]); }); });
}

// std::max(a, b) as the CPU loop applies it: a NaN b leaves a as it is.
__device__ __forceinline__ float max_keep(float a, float b) { return a < b ? b : a; }

// The lanes take the states in parallel (lane k: state c0 + k of a chunk of 32: its LSE, weight
// and value row); the sums that fix the result's bits (the denominator, each dim's accumulator)
// then run in state order, weights and rows broadcast by shuffles. A warp waits for memory about
// once per 32 states for the LSEs and once per kChunk states for the values.
//
// kIn: the dtype every input state has, or -1 for any mix.
template <int kIn>
__global__ void merge_states_kernel(const __grid_constant__ MergeParams prm) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t pairs = prm.num_rows * prm.num_heads, D = prm.head_dim;
  const int total = prm.total_states;
  const StateOut& out = prm.out;
  const int out_size = static_cast<int>(dtype_size(out.dtype));
  for (std::int64_t rh = blockIdx.x * std::int64_t{kPairsPerBlock} + threadIdx.x / kWarp; rh < pairs;
       rh += std::int64_t{gridDim.x} * kPairsPerBlock) {
    const std::int64_t r = rh / prm.num_heads, h = rh % prm.num_heads;
    // The maximum is exact and NaN-free once each lane has filtered its own LSEs, so the
    // butterfly gives the sequential loop's value.
    float m = detail::kNegInf;
    for (int i = lane; i < total; i += kWarp) m = max_keep(m, lse_of(state_ref(prm, i), r, h));
#pragma unroll
    for (int step = kWarp / 2; step > 0; step /= 2) m = max_keep(m, __shfl_xor_sync(0xffffffffu, m, step));
    const bool any = m != detail::kNegInf;
    float denom = 0.0f;
    std::byte* o_row = out.v + (r * out.v_row_stride + h * out.v_head_stride) * out_size;
    // Every lane runs every pass (the shuffles need the whole warp); lanes past the row's dims
    // load and store nothing. The first pass also sums the denominator, so it runs even for
    // head_dim 0 (the LSE is still wanted).
    for (std::int64_t d_base = 0; d_base == 0 || d_base < D; d_base += kWarp * kRun) {
      const std::int64_t d0 = d_base + std::int64_t{lane} * kRun;
      const bool active = d0 < D;
      const int n = active ? static_cast<int>(D - d0 < kRun ? D - d0 : kRun) : 0;
      float acc[kRun] = {};
      for (int c0 = 0; any && c0 < total; c0 += kWarp) {
        float w_lane = 0.0f;
        const std::byte* v_lane = nullptr;  // this lane's state's run at d0... of its row
        int dtype_lane = kIn;
        if (c0 + lane < total) {
          const StateRef st = state_ref(prm, c0 + lane);
          const StateSet& set = *st.set;
          w_lane = weight_of(lse_of(st, r, h), m);
          dtype_lane = static_cast<int>(set.dtype);
          v_lane = set.v + (r * set.v_row_stride + st.index * set.v_state_stride + h * set.v_head_stride) *
                               static_cast<std::int64_t>(dtype_size(set.dtype));
        }
        const int in_chunk = total - c0 < kWarp ? total - c0 : kWarp;
        if (d_base == 0) {
          for (int k = 0; k < in_chunk; ++k) denom = __fadd_rn(denom, __shfl_sync(0xffffffffu, w_lane, k));
        }
        // kChunk states at a time: their loads are all in flight before the first add.
#pragma unroll 1
        for (int k0 = 0; k0 < in_chunk; k0 += kChunk) {
          float w[kChunk];
          std::uint32_t bits[kChunk][kRun];
          DType dt[kChunk];
#pragma unroll
          for (int c = 0; c < kChunk; ++c) {
            const int k = (k0 + c) & (kWarp - 1);
            w[c] = k0 + c < in_chunk ? __shfl_sync(0xffffffffu, w_lane, k) : 0.0f;
            const auto v = reinterpret_cast<const std::byte*>(
                __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(v_lane), k));
            dt[c] = static_cast<DType>(kIn >= 0 ? kIn : __shfl_sync(0xffffffffu, dtype_lane, k));
            const int in_size = static_cast<int>(dtype_size(dt[c]));
#pragma unroll
            for (int j = 0; j < kRun; ++j) bits[c][j] = 0;
            if (w[c] == 0.0f || !active) continue;
            if (prm.vec) {
              load_run(v + d0 * in_size, in_size, bits[c]);
            } else {
              // Unrolled with a predicate: a loop bound of n would put bits in local memory.
#pragma unroll
              for (int j = 0; j < kRun; ++j) {
                if (j < n) bits[c][j] = load_bits(v, in_size, d0 + j);
              }
            }
          }
#pragma unroll
          for (int c = 0; c < kChunk; ++c) {
            if (w[c] == 0.0f) continue;  // empty or past the end: contributes nothing
            float x[kRun];
            decode_run(dt[c], bits[c], x);
#pragma unroll
            for (int j = 0; j < kRun; ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(w[c], x[j]));
          }
        }
      }
      if (!active) continue;
      const float inv = denom > 0.0f ? __fdiv_rn(1.0f, denom) : 0.0f;
#pragma unroll
      for (int j = 0; j < kRun; ++j) acc[j] = __fmul_rn(acc[j], inv);
      std::uint32_t bits[kRun];
      encode_run(out.dtype, acc, bits);
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
  std::int64_t total = 0;
  for (int s = 0; s < num_sets; ++s) {
    const StateSet& set = sets[s];
    prm.sets[s] = set;
    total += set.count;
    prm.vec = prm.vec && set.v_row_stride % kRun == 0 && set.v_state_stride % kRun == 0 &&
              set.v_head_stride % kRun == 0 && aligned(set.v, run_alignment(static_cast<int>(dtype_size(set.dtype))));
  }
  check_supported(total <= std::int64_t{1} << 30, "merge_states: at most 2^30 states per (row, head)");
  prm.total_states = static_cast<int>(total);
  const std::int64_t blocks = std::min((pairs + kPairsPerBlock - 1) / kPairsPerBlock, kMaxBlocks);
  bool uniform = true;
  for (int s = 1; s < num_sets; ++s) uniform = uniform && sets[s].dtype == sets[0].dtype;
  const DType in = num_sets > 0 && uniform ? sets[0].dtype : DType::kI32;
  auto launch = [&](auto kernel) { kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(prm); };
  switch (in) {
    case DType::kF32: launch(merge_states_kernel<static_cast<int>(DType::kF32)>); break;
    case DType::kF16: launch(merge_states_kernel<static_cast<int>(DType::kF16)>); break;
    case DType::kBF16: launch(merge_states_kernel<static_cast<int>(DType::kBF16)>); break;
    default: launch(merge_states_kernel<-1>); break;
  }
  check_launch("merge_states_kernel", stream);
}

}  // namespace pagedattn::cuda
