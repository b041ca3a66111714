// Internal (CUDA): the paged decode kernel and the merge of its split-K partial states.
//
// One CTA handles (sequence, KV head, tile of up to kG query heads of that head's group,
// split of the sequence's keys). Each K/V row is loaded once (8 elements per lane, 16-byte
// loads for 16-bit caches) and used by every query head of the tile: GQA reads each page once
// per group. Lanes of a row reduce their partial dot products with shuffles; every row group
// keeps its own online-softmax state (base-2 exponentials), and the CTA merges them at the end.
// The page ids of the CTA's keys are staged in shared memory, so no load waits on a page-table
// load. Sequences are split by a host-side plan; splits write f32 partial states that
// merge_splits_kernel combines.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/problem.h"
#include "cuda/cuda_check.h"
#include "cuda/kv_vec.cuh"
#include "cuda/mma_fragments.cuh"

namespace pagedattn::cuda {

// Division by a run-time constant without a divide instruction: q = (umulhi(n, mul) + n) >> shift,
// exact for n < 2^31 (Granlund & Montgomery 1994). Built on the host for the page size.
struct FastDiv {
  std::uint32_t divisor = 1, mul = 0, shift = 0;

  static FastDiv make(std::uint32_t d) {
    FastDiv f;
    f.divisor = d;
    while ((std::uint64_t{1} << f.shift) < d) ++f.shift;
    f.mul = static_cast<std::uint32_t>(((std::uint64_t{1} << 32) * ((std::uint64_t{1} << f.shift) - d)) / d + 1);
    return f;
  }
  __device__ __forceinline__ std::uint32_t div(std::uint32_t n) const {
    return (__umulhi(n, mul) + n) >> shift;
  }
};

struct DecodeKernelParams {
  detail::AttentionProblem p;  // device pointers
  std::int64_t partition_tokens = 0;
  std::int64_t max_splits = 1;
  int head_tiles = 1;           // ceil(group_size / kG)
  int entry_prefetch_tiles = 0;  // TMA tiles past the pipeline asked of L2 at a CTA's entry
  bool k_vec = false, v_vec = false;  // 8-element vectors of K / V rows are contiguous, aligned
  FastDiv page_div;                   // by page_size
  float* part_o = nullptr;      // [num_seqs, max_splits, num_q_heads, head_dim]
  float* part_lse = nullptr;    // [num_seqs, max_splits, num_q_heads], base-2
  // The Hopper TMA variant of the tensor-core kernel: K and V as boxes of 64 dims x 16 slots
  // of one head (page_tensor_map.h), coordinates (dim, head, slot, page) or, when
  // !tma_head_inner, (dim, slot, head, page).
  bool tma_head_inner = true;
  // The maps are 5-d instead, (dim % 64, slot, dim / 64, head, page): a box is a tile's 16 rows
  // of every dim (page_tensor_map.h), one box per tile of K and of V.
  bool tma_whole_rows = false;
  // The tensor-core kernels request a block-table row's first page ids before the sequence's length.
  bool speculate_pages = true;
  // The tensor-core kernel's warps take a CTA's tiles past their first ones from a shared
  // counter instead of a static interleave (DecodePlan::balance_warps): faster where warps
  // stream at different rates, but which warp sums which tiles then depends on timing, so the
  // results' last bits change from run to run.
  bool balance_warps = false;
  // V transposed in 16-byte runs of slots per dim (vLLM's split layout, pages of a multiple of
  // a run: 8 16-bit or 16 fp8 slots): the tensor-core kernel's kVT.
  bool v_transposed = false;
  // CUDA-core kernel only: keys past the query's position are not attended (the rows are a
  // causal prefill's query tokens, prefill_by_rows.cu; a decode query sits after all its keys).
  bool clip_keys_to_query = false;
  // How far L2 widens the tensor-core kernel's 16-byte cp.async tile copies (fp8 caches, pages
  // that do not hold whole tiles): 256, 128 or 64 bytes, or 0 for no widening
  // (PAGEDATTN_CP_ASYNC_L2_PREFETCH; cp_async_16_widened).
  int cp_async_l2_bytes = 256;
  CUtensorMap k_tiles, v_tiles;
};

constexpr int kDecodeThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// A sequence's splits, at most the plan's: a graph replayed with a sequence longer than the
// host copy it was planned from gives that sequence's last split the keys past the plan
// (init_cta), instead of a split without a partial-state slot (or without a workspace at all).
__device__ __forceinline__ std::int64_t num_splits_of(const DecodeKernelParams& prm,
                                                      std::int64_t len) {
  return len <= prm.partition_tokens ? 1 : min(prm.max_splits, ceil_div(len, prm.partition_tokens));
}

// What one decode CTA works on: (sequence, KV head, tile of query heads, key split).
struct DecodeCta {
  std::int64_t s = 0, split = 0, n_splits = 1;
  int kv_head = 0, group = 1, g0 = 0, n_g = 0;
  detail::SeqPages pages;
  std::int64_t q_pos = 0;             // the query's position, relative to this row's key 0
  std::int64_t t_begin = 0, t_end = 0;  // keys [t_begin, t_end) of the split, window applied
};

// Programmatic dependent launch (sm_90+; no-ops before): the decode grid lets the merge grid
// launch early, and the merge grid waits until the decode grid's writes are visible.
__device__ __forceinline__ void allow_dependent_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_primary_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// The decode grid: x the (KV head, query-head tile) pairs, y the splits, z the sequences. The
// blocks of one split start together (x is the fastest index), so the heads of a page are read
// at about the same time (H100, split-major vs split-fastest order: GQA 1 x 32768 56.2-56.4 vs
// 56.5-56.7 us, 4 x 8192 56.4-56.6 vs 57.1-57.2; docs/perf-notes.md, CUDA decode v32).
inline dim3 decode_grid(std::int64_t splits, std::int64_t head_tiles_of_all_heads, std::int64_t seqs) {
  return dim3(static_cast<unsigned>(head_tiles_of_all_heads), static_cast<unsigned>(splits),
              static_cast<unsigned>(seqs));
}

// The CTA's (sequence, split, KV head, query-head tile) from the block index (decode_grid): no
// memory reads, so a kernel can issue its q loads before init_cta's page-table reads.
__device__ __forceinline__ DecodeCta cta_coords(const DecodeKernelParams& prm, int g_tile) {
  const detail::AttentionProblem& p = prm.p;
  DecodeCta cta;
  cta.s = blockIdx.z;
  cta.split = blockIdx.y;
  cta.kv_head = static_cast<int>(blockIdx.x) / prm.head_tiles;
  cta.group = static_cast<int>(p.num_q_heads / p.num_kv_heads);
  cta.g0 = (static_cast<int>(blockIdx.x) % prm.head_tiles) * g_tile;
  cta.n_g = min(g_tile, cta.group - cta.g0);
  return cta;
}

// Completes `cta` from the page table; false when the block has no split of its sequence to do.
__device__ __forceinline__ bool init_cta(const DecodeKernelParams& prm, DecodeCta& cta) {
  allow_dependent_grid();  // the merge grid only waits; it may be scheduled now
  const detail::AttentionProblem& p = prm.p;
  cta.pages = p.pages_of(cta.s);
  cta.n_splits = num_splits_of(prm, cta.pages.kv_len);
  if (cta.split >= cta.n_splits) return false;
  cta.q_pos = p.query_end(cta.s) - 1 - p.key_offset(cta.s);
  cta.t_begin = cta.split * prm.partition_tokens;
  cta.t_end = cta.split + 1 == cta.n_splits ? cta.pages.kv_len : min(cta.pages.kv_len, cta.t_begin + prm.partition_tokens);
  // Keys left of the sliding window are masked for the (last-position) query: never read them.
  if (p.variant.window_left >= 0) cta.t_begin = max(cta.t_begin, cta.q_pos - p.variant.window_left);
  return true;
}

// Stages the page ids of pages [cp0, cp1) of the CTA's sequence into s_pages (whole CTA).
__device__ __forceinline__ void stage_pages(const DecodeCta& cta, std::int64_t cp0, std::int64_t cp1,
                                            std::int32_t* s_pages) {
  __syncthreads();  // the previous chunk's ids are no longer read
  for (std::int64_t i = threadIdx.x; i < cp1 - cp0; i += blockDim.x) {
    s_pages[i] = static_cast<std::int32_t>(cta.pages.page(cp0 + i));
  }
  __syncthreads();
}

// Folds the attention sink of query head h (one more denominator term, without a value) into
// a finished state (max M, sum L, base 2). Returns the factor the unnormalised output takes.
__device__ __forceinline__ float fold_sink(const detail::AttentionProblem& p, std::int64_t h, float& M, float& L) {
  if (!p.variant.sinks) return 1.0f;
  const float sink = p.variant.sinks[h] * kLog2e;
  const float M2 = fmaxf(M, sink);
  const float scale = exp2f(M - M2);
  L = L * scale + exp2f(sink - M2);
  M = M2;
  return scale;
}

// The natural-log LSE of a state (max M, sum L, base 2); -inf when it is empty.
__device__ __forceinline__ float natural_lse(float M, float L) {
  return L > 0.0f ? (M + log2f(L)) * kLn2 : detail::kNegInf;
}

// Query head h's place among the partial states (part_lse's index; part_o's row) of the CTA's split.
__device__ __forceinline__ std::int64_t split_state_index(const DecodeKernelParams& prm, const DecodeCta& cta,
                                                          std::int64_t h) {
  return (cta.s * prm.max_splits + cta.split) * prm.p.num_q_heads + h;
}

// Completes query head h's state (max M, sum L, base 2) at a CTA's end: writes, if `write_lse`,
// the split's partial LSE when its sequence is split, else the natural-log LSE with the sink
// folded in (where the caller asked for LSEs); returns the factor that normalises the head's
// unnormalised output (with the fp8 V scale).
__device__ __forceinline__ float finish_head_state(const DecodeKernelParams& prm, const DecodeCta& cta, std::int64_t h,
                                                   float M, float L, float v_scale, bool write_lse) {
  const detail::AttentionProblem& p = prm.p;
  if (cta.n_splits > 1) {  // the split's partial state, normalised, for the merge launch
    if (write_lse) prm.part_lse[split_state_index(prm, cta, h)] = L > 0.0f ? M + log2f(L) : detail::kNegInf;
    return L > 0.0f ? v_scale / L : 0.0f;
  }
  const float sink_scale = fold_sink(p, h, M, L);  // M and L take the sink's term
  if (write_lse && p.qo.lse) p.qo.lse[cta.s * p.qo.lse_token_stride + h * p.qo.lse_head_stride] = natural_lse(M, L);
  return L > 0.0f ? sink_scale * v_scale / L : 0.0f;
}

// Merges the n_states partial states the CTA left in shared memory (state r, head g: max
// s_m[r * g_stride + g] and sum s_l[...] in base 2, unnormalised output at
// s_acc[(r * g_stride + g) * acc_stride + d]) and writes the result: the final output and LSE
// (with sinks) when the sequence has one split, else the split's f32 partial state.
__device__ __forceinline__ void write_cta_result(const DecodeKernelParams& prm, const DecodeCta& cta,
                                                 const float* s_m, const float* s_l, const float* s_acc,
                                                 int n_states, int g_stride, int acc_stride, float v_scale) {
  const detail::AttentionProblem& p = prm.p;
  const int D = static_cast<int>(p.head_dim);
  const float neg_inf = detail::kNegInf;
  const auto out_size = static_cast<std::int64_t>(dtype_size(p.qo.out_dtype));
  for (int idx = threadIdx.x; idx < cta.n_g * D; idx += static_cast<int>(blockDim.x)) {
    const int g = idx / D, d = idx % D;
    const std::int64_t h = static_cast<std::int64_t>(cta.kv_head) * cta.group + cta.g0 + g;
    float M = neg_inf;
    for (int r = 0; r < n_states; ++r) M = fmaxf(M, s_m[r * g_stride + g]);
    float L = 0.0f, O = 0.0f;
    if (M != neg_inf) {
      for (int r = 0; r < n_states; ++r) {
        const float w = exp2f(s_m[r * g_stride + g] - M);
        L += w * s_l[r * g_stride + g];
        O += w * s_acc[(r * g_stride + g) * acc_stride + d];
      }
    }
    const float inv = finish_head_state(prm, cta, h, M, L, v_scale, d == 0);
    if (cta.n_splits > 1) {
      prm.part_o[split_state_index(prm, cta, h) * D + d] = O * inv;
      continue;
    }
    std::byte* o_row = p.qo.out + (cta.s * p.qo.out_token_stride + h * p.qo.out_head_stride) * out_size;
    store_one(o_row, p.qo.out_dtype, d, O * inv);
  }
}

// ---- cp.async (sm_80+): global -> shared copies that do not occupy registers ----------------

// 16 bytes global -> shared with the L2 fetch widened to l2_bytes (256, 128, 64; else none): a
// value uniform over the grid, so the branch costs no divergence.
__device__ __forceinline__ void cp_async_16_widened(void* smem, const void* gmem, int l2_bytes) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if (l2_bytes == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
  } else if (l2_bytes == 128) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
  } else if (l2_bytes == 64) {
    asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
  }
}

// bytes: 16, 8 or 4 (a compile-time constant at every call, so the branches fold away).
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, int bytes) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if (bytes == 16) {
    // The L2 fetches whole 256-byte segments from DRAM: K/V rows are 256 contiguous bytes or
    // more at head_dim 128, and the larger requests took the GQA decode from 90 to 92% of the
    // copy ceiling on d-b64 (93.5% on d-b256).
    cp_async_16_widened(smem, gmem, 256);
  } else if (bytes == 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(gmem));
  } else {  // 4
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem));
  }
}
// The first `bytes` (0..16) of 16 bytes global -> shared (a shared-window address), the rest
// of the 16 zeros; 16-byte aligned source.
__device__ __forceinline__ void cp_async_16_prefix(std::uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Shared memory of one CTA: the staged page ids, then a region used first by the cp.async
// pipeline ([stage][warp][unroll][k|v][lane][8 elements]) and afterwards by the merge of the
// row groups' states ([row][g][head_dim] accumulators, then [row][g] maxima and sums).
template <class KV, int kLanes, int kG>
struct DecodeSmem {
  static constexpr int kWarps = kDecodeThreads / 32;
  static constexpr int kRowsPerWarp = 32 / kLanes;
  static constexpr int kRows = kWarps * kRowsPerWarp;
  static constexpr int kDMax = kLanes * 8;
  static constexpr int kUnroll = kG >= 8 ? 2 : 4;
  static constexpr int kStages = 3;
  static constexpr int kPageChunk = 1024;
  static constexpr int kLaneBytes = 8 * static_cast<int>(sizeof(KV));
  static constexpr int kStageWarpBytes = kUnroll * 2 * 32 * kLaneBytes;
  static constexpr int kPipeBytes = kStages * kWarps * kStageWarpBytes;
  static constexpr int kMergeBytes = kRows * kG * (kDMax + 2) * 4;
  static constexpr int kBytes = kPageChunk * 4 + (kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes);
};

// kPipelined: K and V rows are 8-element contiguous vectors (NHD, HND, vLLM K for 16/8-bit),
// streamed through a kStages-deep cp.async pipeline; otherwise rows are gathered element by
// element from global memory (vLLM's token-contiguous V), a slower but complete path.
template <class KV, int kLanes, int kG, bool kPipelined>
__global__ void __launch_bounds__(kDecodeThreads)
    paged_decode_kernel(const __grid_constant__ DecodeKernelParams prm) {
  using Smem = DecodeSmem<KV, kLanes, kG>;
  constexpr int kRowsPerWarp = Smem::kRowsPerWarp, kRows = Smem::kRows, kUnroll = Smem::kUnroll;
  constexpr int kStages = Smem::kStages, kPageChunk = Smem::kPageChunk, kWarps = Smem::kWarps;
  constexpr int kTile = kRowsPerWarp * kUnroll;  // tokens a warp handles per pipeline step
  constexpr float kNegInf = detail::kNegInf;
  extern __shared__ __align__(16) unsigned char smem[];
  auto* s_pages = reinterpret_cast<std::int32_t*>(smem);
  unsigned char* s_region = smem + kPageChunk * 4;

  const detail::AttentionProblem& p = prm.p;
  DecodeCta cta = cta_coords(prm, kG);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row_in_warp = lane / kLanes;
  const int row = warp * kRowsPerWarp + row_in_warp;
  const int d0 = (lane % kLanes) * 8;
  const int D = static_cast<int>(p.head_dim);
  const bool active = d0 < D;
  // q first: its loads need only the block index, so they overlap init_cta's page-table reads.
  float q[kG][8], slope[kG];
  visit_q_type(p.qo.q_dtype, [&](auto tag) {
    using Q = typename decltype(tag)::type;
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      const std::int64_t h = static_cast<std::int64_t>(cta.kv_head) * cta.group + cta.g0 + g;
      const bool live = g < cta.n_g && active;
      slope[g] = (g < cta.n_g && p.variant.alibi_slopes) ? p.variant.alibi_slopes[h] : 0.0f;
      const Q* q_row = reinterpret_cast<const Q*>(p.qo.q) + cta.s * p.qo.q_token_stride + h * p.qo.q_head_stride;
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][i] = live ? to_float(q_row[d0 + i]) : 0.0f;
    }
  });
  if (!init_cta(prm, cta)) return;
  if (prm.clip_keys_to_query) cta.t_end = min(cta.t_end, cta.q_pos + 1);
  const std::int64_t q_pos = cta.q_pos, t_begin = cta.t_begin, t_end = cta.t_end;
  const int kv_head = cta.kv_head;
  const std::int64_t P = p.kv.page_size;

  const DType kv_dtype = p.kv.dtype;
  const bool fp8 = is_fp8(kv_dtype);
  const float k_scale = fp8 ? p.kv.k_scale_of(kv_head) : 1.0f;
  const float v_scale = fp8 ? p.kv.v_scale_of(kv_head) : 1.0f;
  const float soft_cap = p.variant.soft_cap;
  const bool plain = soft_cap == 0.0f && p.variant.alibi_slopes == nullptr;
  const float q_mul = p.variant.scale * k_scale * (plain ? kLog2e : 1.0f);
#pragma unroll
  for (int g = 0; g < kG; ++g)
#pragma unroll
    for (int i = 0; i < 8; ++i) q[g][i] *= q_mul;
  // Element offset of this lane's 8 dims within a (page, token) for K and V.
  const detail::KVTensorAccess& ka = p.kv.k;
  const detail::KVTensorAccess& va = p.kv.v;
  const std::int64_t k_lane = active ? ka.offset(0, kv_head, 0, d0) : 0;
  const std::int64_t v_lane = active ? va.offset(0, kv_head, 0, d0) : 0;
  const KV* k_base = reinterpret_cast<const KV*>(ka.data);
  const KV* v_base = reinterpret_cast<const KV*>(va.data);

  float m[kG], l[kG], acc[kG][8];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    m[g] = kNegInf;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }

  // One step of the online softmax over the kUnroll tokens of a tile; `fetch(u, is_v, f)`
  // produces this lane's 8 elements of token u's K (is_v false) or V row.
  auto consume = [&](std::int64_t tile_t0, std::int64_t c_end, auto&& fetch) {
    float x[kUnroll][kG];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t t = tile_t0 + u * kRowsPerWarp + row_in_warp;
      float kf[8];
      fetch(u, false, t < c_end, kf);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = fmaf(q[g][i], kf[i], dot);
#pragma unroll
        for (int off = kLanes / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (!plain) {
          if (soft_cap > 0.0f) dot = soft_cap * tanhf(dot / soft_cap);
          dot = (dot + slope[g] * static_cast<float>(t - q_pos)) * kLog2e;
        }
        x[u][g] = t < c_end ? dot : kNegInf;
      }
    }
    float mb[kG], corr[kG];
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      mb[g] = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mb[g] = fmaxf(mb[g], x[u][g]);
      corr[g] = mb[g] == kNegInf ? 1.0f : fast_exp2(m[g] - mb[g]);
      l[g] *= corr[g];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= corr[g];
      m[g] = mb[g];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t t = tile_t0 + u * kRowsPerWarp + row_in_warp;
      if (t >= c_end) continue;  // uniform across the lanes of a row
      float vf[8];
      fetch(u, true, true, vf);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        const float pu = fast_exp2(x[u][g] - m[g]);
        l[g] += pu;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(pu, vf[i], acc[g][i]);
      }
    }
  };

  for (std::int64_t cp0 = t_begin / P; t_begin < t_end && cp0 * P < t_end; cp0 += kPageChunk) {
    const std::int64_t cp1 = min(cp0 + kPageChunk, ceil_div(t_end, P));
    stage_pages(cta, cp0, cp1, s_pages);
    const std::int64_t c_begin = max(t_begin, cp0 * P), c_end = min(t_end, cp1 * P);
    // Element offset of token t's row (this lane's dims) for K and V.
    auto row_offsets = [&](std::int64_t t, std::int64_t& k_off, std::int64_t& v_off) {
      const auto local = static_cast<std::uint32_t>(t - cp0 * P);  // < kPageChunk pages
      const std::uint32_t page_idx = prm.page_div.div(local);
      const std::int64_t page = s_pages[page_idx];
      const std::int64_t slot = local - page_idx * static_cast<std::uint32_t>(P);
      k_off = page * ka.page_stride + slot * ka.token_stride + k_lane;
      v_off = page * va.page_stride + slot * va.token_stride + v_lane;
    };
    const std::int64_t n_tiles = ceil_div(c_end - c_begin, kTile);
    const std::int64_t n_mine = n_tiles > warp ? ceil_div(n_tiles - warp, kWarps) : 0;
    auto tile_start = [&](std::int64_t j) { return c_begin + (warp + j * kWarps) * kTile; };

    if constexpr (kPipelined) {
      unsigned char* warp_pipe = s_region + warp * Smem::kStageWarpBytes;
      auto slot_ptr = [&](std::int64_t j, int u, int is_v) {
        return warp_pipe + (j % kStages) * (kWarps * Smem::kStageWarpBytes) +
               ((u * 2 + is_v) * 32 + lane) * Smem::kLaneBytes;
      };
      auto issue = [&](std::int64_t j) {
        if (j < n_mine && active) {
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const std::int64_t t = tile_start(j) + u * kRowsPerWarp + row_in_warp;
            if (t >= c_end) continue;
            std::int64_t k_off, v_off;
            row_offsets(t, k_off, v_off);
            constexpr int kCopy = Smem::kLaneBytes >= 16 ? 16 : 8;
#pragma unroll
            for (int c = 0; c < Smem::kLaneBytes / kCopy; ++c) {
              cp_async(slot_ptr(j, u, 0) + c * kCopy, reinterpret_cast<const unsigned char*>(k_base + k_off) + c * kCopy, kCopy);
              cp_async(slot_ptr(j, u, 1) + c * kCopy, reinterpret_cast<const unsigned char*>(v_base + v_off) + c * kCopy, kCopy);
            }
          }
        }
        cp_async_commit();  // an empty group keeps the wait count uniform
      };
#pragma unroll
      for (int j = 0; j < kStages - 1; ++j) issue(j);
      for (std::int64_t j = 0; j < n_mine; ++j) {
        issue(j + kStages - 1);
        cp_async_wait<kStages - 1>();  // this thread's copies of tile j have landed
        consume(tile_start(j), c_end, [&](int u, bool is_v, bool valid, float (&f)[8]) {
          if (valid && active) {
            convert8<KV>(slot_ptr(j, u, is_v ? 1 : 0), f);
          } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) f[i] = 0.0f;
          }
        });
      }
      cp_async_wait<0>();
    } else {
      for (std::int64_t j = 0; j < n_mine; ++j) {
        const std::int64_t t0 = tile_start(j);
        consume(t0, c_end, [&](int u, bool is_v, bool valid, float (&f)[8]) {
          const std::int64_t t = t0 + u * kRowsPerWarp + row_in_warp;
          if (!(valid && active)) {
#pragma unroll
            for (int i = 0; i < 8; ++i) f[i] = 0.0f;
            return;
          }
          std::int64_t k_off, v_off;
          row_offsets(t, k_off, v_off);
          const detail::KVTensorAccess& a = is_v ? va : ka;
          const std::int64_t base = is_v ? v_off : k_off;
          // Dims d0..d0+7 of one row, wherever the layout puts them.
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const std::int64_t rel = a.offset(0, 0, 0, d0 + i) - a.offset(0, 0, 0, d0);
            f[i] = load_one(is_v ? static_cast<const void*>(v_base) : k_base, kv_dtype, base + rel);
          }
        });
      }
    }
  }

  // Merge the row groups' states.
  __syncthreads();
  auto* s_acc = reinterpret_cast<float*>(s_region);          // [kRows][kG][D]
  float* s_m = s_acc + kRows * kG * Smem::kDMax;              // [kRows][kG]
  float* s_l = s_m + kRows * kG;
  if (lane % kLanes == 0) {
#pragma unroll
    for (int g = 0; g < kG; ++g) s_m[row * kG + g] = m[g], s_l[row * kG + g] = l[g];
  }
  if (active) {
#pragma unroll
    for (int g = 0; g < kG; ++g)
#pragma unroll
      for (int i = 0; i < 8; ++i) s_acc[(row * kG + g) * Smem::kDMax + d0 + i] = acc[g][i];
  }
  __syncthreads();
  write_cta_result(prm, cta, s_m, s_l, s_acc, kRows, kG, Smem::kDMax, v_scale);
}

// Launches paged_decode_kernel<KV, lanes, g_tile, pipelined> (lanes in {8, 16, 32}: head_dim
// up to 64, 128, 256; g_tile in {1, 4, 8}). Instantiated per KV type in instantiations/*.cu.
template <class KV, int kLanes, int kG, bool kPipelined>
void launch_decode_variant(const DecodeKernelParams& prm, dim3 grid, cudaStream_t stream) {
  constexpr int kBytes = DecodeSmem<KV, kLanes, kG>::kBytes;
  auto kernel = paged_decode_kernel<KV, kLanes, kG, kPipelined>;
  if (allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), kBytes) != cudaSuccess) {
    return;  // reported by the caller's launch check
  }
  kernel<<<grid, kDecodeThreads, kBytes, stream>>>(prm);
}

template <class KV>
void launch_paged_decode(const DecodeKernelParams& prm, int lanes, int g_tile, dim3 grid,
                         cudaStream_t stream) {
  const bool pipelined = prm.k_vec && prm.v_vec;
  auto with_lanes = [&](auto lanes_c) {
    constexpr int kLanes = decltype(lanes_c)::value;
    auto with_g = [&](auto g_c) {
      constexpr int kG = decltype(g_c)::value;
      if (pipelined) launch_decode_variant<KV, kLanes, kG, true>(prm, grid, stream);
      else launch_decode_variant<KV, kLanes, kG, false>(prm, grid, stream);
    };
    switch (g_tile) {
      case 1: return with_g(std::integral_constant<int, 1>{});
      case 4: return with_g(std::integral_constant<int, 4>{});
      default: return with_g(std::integral_constant<int, 8>{});
    }
  };
  switch (lanes) {
    case 8: return with_lanes(std::integral_constant<int, 8>{});
    case 16: return with_lanes(std::integral_constant<int, 16>{});
    default: return with_lanes(std::integral_constant<int, 32>{});
  }
}
// Compiled only in instantiations/decode_*.cu, not in every file that includes this one.
extern template void launch_paged_decode<float>(const DecodeKernelParams&, int, int, dim3, cudaStream_t);
extern template void launch_paged_decode<__nv_bfloat16>(const DecodeKernelParams&, int, int, dim3, cudaStream_t);
extern template void launch_paged_decode<__half>(const DecodeKernelParams&, int, int, dim3, cudaStream_t);
extern template void launch_paged_decode<Fp8E4M3>(const DecodeKernelParams&, int, int, dim3, cudaStream_t);
extern template void launch_paged_decode<Fp8E5M2>(const DecodeKernelParams&, int, int, dim3, cudaStream_t);

}  // namespace pagedattn::cuda
