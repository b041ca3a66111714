// Paged decode on CUDA: the host-side split planner, the launch, and the split merge.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "core/env_switch.h"
#include "cuda/cuda_check.h"
#include "cuda/decode.h"
#include "cuda/decode_kernel.cuh"
#include "cuda/decode_mma_kernel.cuh"
#include "cuda/decode_mma_launch.h"
#include "cuda/decode_split_plan.h"
#include "cuda/kv_rows.h"
#include "cuda/page_tensor_map.h"
#include "cuda/sm_count.h"
#include "cuda/workspace.h"

namespace pagedattn::cuda {

namespace {
// A CTA's keys from which a ragged batch's CTAs take four warps (use_wide_ctas).
constexpr std::int64_t kWideCtaTokens = 6144;

// Which kernel runs a problem; the planner and the launch both use this one choice.
struct KernelChoice {
  bool mma_able = false;   // the tensor-core kernel could run it (dtypes, rows, head_dim)
  bool mma = false;        // ... and takes it on every GPU: groups >= 2 (fp8: any), any with vt
  bool vec = false;        // K and V rows load as aligned 8-element vectors
  bool vt = false;         // ... or K's do and V is transposed in 16-byte runs of slots (vLLM's split layout)
  int lanes = 16;          // CUDA-core kernel: lanes per row (head_dim up to 8 * lanes)
  bool key_rows = false;   // the tensor-core kernel with keys as the MMA's rows (groups <= 8)
  int g_tile = 1;          // query heads per CTA
  std::int64_t head_tiles = 1;
};

// Whether the tensor-core kernel's portable (cp.async) variant fits a block of `device` past
// head_dim 128 (the 256 kernel): ~100-111 KB, past the 99 KB of sm_86 / sm_89 / sm_120 (those keep the CUDA-core
// kernel there). The TMA variant runs only on sm_90 (227 KB).
bool mma_fits_device(const detail::AttentionProblem& p, bool vt, int device) {
  if (mma_kernel_dim(p.head_dim) <= 128) return true;
  const bool fp8 = is_fp8(p.kv.dtype);
  const int need = fp8 && vt ? MmaDecodeSmem<Fp8E4M3, 256, false, 2, kMmaDecodeWarps, true>::kBytes
                   : fp8     ? MmaDecodeSmem<Fp8E4M3, 256>::kBytes
                   : vt      ? MmaDecodeSmem<__nv_bfloat16, 256, false, 1, kMmaDecodeWarps, true>::kBytes
                             : MmaDecodeSmem<__nv_bfloat16, 256>::kBytes;
  return need <= cached_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
}

// Query heads per CTA of the CUDA-core kernel (it keeps a tile's q rows in registers).
int cuda_core_g_tile(std::int64_t group) { return group <= 1 ? 1 : group <= 4 ? 4 : 8; }

// The CUDA-core kernel for the cache's dtype.
void launch_cuda_core(const DecodeKernelParams& prm, int lanes, int g_tile, dim3 grid, cudaStream_t stream) {
  switch (prm.p.kv.dtype) {
    case DType::kBF16: launch_paged_decode<__nv_bfloat16>(prm, lanes, g_tile, grid, stream); break;
    case DType::kF16: launch_paged_decode<__half>(prm, lanes, g_tile, grid, stream); break;
    case DType::kF32: launch_paged_decode<float>(prm, lanes, g_tile, grid, stream); break;
    case DType::kF8E4M3: launch_paged_decode<Fp8E4M3>(prm, lanes, g_tile, grid, stream); break;
    case DType::kF8E5M2: launch_paged_decode<Fp8E5M2>(prm, lanes, g_tile, grid, stream); break;
    default: check_supported(false, "decode: unsupported KV dtype on CUDA");
  }
}

KernelChoice choose_kernel(const detail::AttentionProblem& p, int device) {
  KernelChoice c;
  const std::int64_t group = p.group_size();
  const DType kv = p.kv.dtype, q = p.qo.q_dtype;
  c.vec = rows_vectorisable(p.kv.k, kv, 8) && rows_vectorisable(p.kv.v, kv, 8);
  const bool q16 = q == DType::kBF16 || q == DType::kF16;
  // vLLM's split layout: K in 16-byte chunks, V transposed in 16-byte runs of slots, which the
  // tensor-core kernel stages as rows of dims (the CUDA-core kernel reads V element by element).
  c.vt = !c.vec && q16 && (kv == q || is_fp8(kv)) && rows_vectorisable(p.kv.k, kv, elements_per_copy(kv)) &&
         v_runs_vectorisable(p.kv);
  // The tensor cores multiply in q's 16-bit dtype when the cache has it, or in f16 for an fp8
  // cache copied in 16-element (16-byte) chunks and widened exactly.
  const bool mma_kv = kv == q || (is_fp8(kv) && rows_vectorisable(p.kv.k, kv, 16) &&
                                  (c.vt || rows_vectorisable(p.kv.v, kv, 16)));
  c.mma_able = (c.vec || c.vt) && q16 && mma_kv && p.head_dim % 8 == 0 && p.head_dim <= 256 &&
               mma_fits_device(p, c.vt, device);
  // Groups below 4 leave most of the tensor-core tiles' rows idle, but for an fp8 cache the
  // CUDA-core kernel's per-element widening costs more than the idle rows (H200: MHA fp8 1.4-1.7x
  // and group-2 fp8 3.7x faster on the tensor-core kernel, v48), and at groups 2-3 its 4-head
  // tiles do twice a group of 2's work (bf16 in 1-token pages, GQA 32/16: 2.3-2.4x faster on
  // the tensor-core kernel, v49). 16-bit MHA off TMA stays (1-token pages: 3% slower there, v48).
  // PAGEDATTN_DECODE_SMALL_GROUP_MMA: 0 = never, 1 = fp8 caches and groups 2-3 (the default),
  // 2 = also 16-bit MHA.
  const int small_groups = detail::env_int("PAGEDATTN_DECODE_SMALL_GROUP_MMA", 0, 2).value_or(1);
  c.mma = c.mma_able &&
          (group >= 4 || c.vt || small_groups == 2 || (small_groups == 1 && (is_fp8(kv) || group >= 2)));
  // Groups of at most 8 heads fill the transposed products' 8 columns (the untransposed ones'
  // 16 rows would be half empty or less). PAGEDATTN_DECODE_KEY_ROWS=0 turns them off.
  c.key_rows = c.mma_able && group <= 8 && detail::env_switch("PAGEDATTN_DECODE_KEY_ROWS", true);
  c.lanes = p.head_dim <= 64 ? 8 : p.head_dim <= 128 ? 16 : 32;
  c.g_tile = c.mma ? (c.key_rows ? 8 : 16) : cuda_core_g_tile(group);
  c.head_tiles = (group + c.g_tile - 1) / c.g_tile;
  return c;
}

// The tensor-core kernel's Hopper variant: K/V tiles as TMA boxes of 16 slots, so pages must
// hold whole tiles, and the cache must be q's 16-bit dtype in rows the driver can describe.
// Any group size: for MHA (the one group choose_kernel leaves off the tensor cores for a 16-bit
// cache) the tiles waste tensor-core work, but the TMA stream is still faster than the CUDA-core
// kernel's (H100, MHA 32/32: 0.6-1.7% on every decode shape,
// docs/perf-notes.md v19), except below head_dim 128 where the kernel runs zero-padded: it
// issues d128's work per tile for fewer bytes, and the CUDA-core kernel is faster there (H100
// MHA d80 64 x 2048 / 16 x 4096 / 1 x 32768: 500 / 278-290 / 205 us against 580 / 415-431 / 172;
// d96 on par; d192 TMA faster; v29). fp8 caches take it on the kernel with key rows at head_dim
// 128 (PAGEDATTN_DECODE_FP8_TMA=0 keeps them on cp.async). PAGEDATTN_DECODE_TMA=0 turns it off.
// tma_tiles_may_apply: every condition but whether the driver can describe the rows (which
// use_tma_tiles then asks by encoding the maps), for planner rules that need no more than which
// kernel the call almost surely takes (an encoding that fails leaves it a TMA plan).
bool tma_tiles_may_apply(const detail::AttentionProblem& p, const DecodePlan& plan, const KernelChoice& choice,
                         int device) {
#if defined(PAGEDATTN_WITH_SM90A)
  if (!plan.tma_tiles || detail::env_switched_off("PAGEDATTN_DECODE_TMA")) return false;
  const bool fp8_rows = is_fp8(p.kv.dtype) && choice.mma &&
                        fp8_kernel_takes_tma_tiles(p.head_dim, choice.key_rows, choice.vt) &&
                        detail::env_switch("PAGEDATTN_DECODE_FP8_TMA", true);
  if (!choice.mma_able || choice.vt || !(p.kv.dtype == p.qo.q_dtype || fp8_rows) || p.kv.page_size % 16 != 0) {
    return false;
  }
  if (!choice.mma && p.head_dim < 128 && p.head_dim != 64) return false;
  return is_sm90(device);
#else
  (void)p, (void)plan, (void)choice, (void)device;
  return false;
#endif
}

// Whether the TMA variant runs the call; fills prm's maps when it does. With prm null, only
// says whether it applies (the one-CTA-per-SM rule's question).
bool use_tma_tiles(const detail::AttentionProblem& p, const DecodePlan& plan, const KernelChoice& choice, int device,
                   DecodeKernelParams* prm) {
#if defined(PAGEDATTN_WITH_SM90A)
  if (!tma_tiles_may_apply(p, plan, choice, device)) return false;
  KVPageBoxes boxes;
  const bool fp8 = is_fp8(p.kv.dtype);  // one box of 16 whole 128-byte rows
  const bool whole_rows = !fp8 && !detail::env_switched_off("PAGEDATTN_DECODE_WHOLE_ROWS") &&
                          encode_kv_page_boxes(p.kv, 64, 16, boxes, true);
  if (!whole_rows && !(fp8 ? encode_kv_page_boxes(p.kv, 128, 16, boxes, false, true)
                           : encode_kv_page_boxes(p.kv, 64, 16, boxes))) {
    return false;
  }
  if (prm != nullptr) {
    prm->tma_whole_rows = whole_rows;
    prm->k_tiles = boxes.k;
    prm->v_tiles = boxes.v;
    prm->tma_head_inner = boxes.head_inner;
  }
  return true;
#else
  (void)p, (void)plan, (void)choice, (void)device, (void)prm;
  return false;
#endif
}

// A grid's CTAs and the device's SMs, which the decode kernels' shape choices compare.
struct GridFill {
  std::int64_t ctas = 0, sms = 0;
};
GridFill grid_fill(dim3 grid, int device) {
  return {static_cast<std::int64_t>(grid.x) * grid.y * grid.z, static_cast<std::int64_t>(sm_count(device))};
}

// How far L2 widens the cp.async tile copies' fetches (DecodeKernelParams::cp_async_l2_bytes):
// cp_async_l2_fetch_bytes's rule, or PAGEDATTN_CP_ASYNC_L2_PREFETCH=0 / 64 / 128 / 256 for
// measurements.
int cp_async_l2_bytes(const detail::AttentionProblem& p, GridFill fill) {
  if (auto forced = detail::env_int("PAGEDATTN_CP_ASYNC_L2_PREFETCH", 0, 256)) return *forced;
  return cp_async_l2_fetch_bytes(p.head_dim, fill.ctas, fill.sms);
}

// With PAGEDATTN_DECODE_REPORT=1, a decode launch prints what it runs to stderr (kernel, its
// shape choices, grid, splits) whenever that differs from the thread's previous report, so that
// a measurement says which path each case took without a profiler.
bool decode_report_on() { return detail::env_switch("PAGEDATTN_DECODE_REPORT", false); }
std::string grid_summary(dim3 grid, GridFill fill, const DecodePlan& plan, bool row_merge) {
  std::string s = "grid " + std::to_string(grid.x) + " x " + std::to_string(grid.y) + " x " + std::to_string(grid.z) +
                  " = " + std::to_string(fill.ctas) + " CTAs on " + std::to_string(fill.sms) + " SMs; ";
  s += plan.max_splits > 1 ? std::to_string(plan.max_splits) + " splits of " + std::to_string(plan.partition_tokens) +
                                 " keys, " + (row_merge ? "warp-per-row merge" : "CTA-per-row merge")
                           : std::string("one pass");
  return plan.balance_warps ? s + "; warps balance tiles" : s;
}
void report_decode_launch(const std::string& what) {
  thread_local std::string last;
  if (what == last) return;
  last = what;
  std::fprintf(stderr, "pagedattn decode: %s\n", what.c_str());
}

// Two tiles per softmax step for the TMA kernel (its four stages' shared memory fits three
// CTAs per SM, one-tile steps four): a step's dependent chain then serves 32 keys. That pays
// wherever the grid's waves are not cut worse by the fourth CTA per SM's absence: always except
// when the grid is one wave at four CTAs per SM but more than one at three (H100: 512-CTA grids
// 8-9% slower with pairs; one-wave grids at three per SM 1-3% faster, many-wave and ragged grids
// 1-4% faster: docs/perf-notes.md, CUDA decode v16 and v20). PAGEDATTN_DECODE_PAIRS=0 / 1
// forces one / two.
// Except for groups below 4 (MHA on the tensor-core kernel, 15 of 16 rows idle) whose CTAs stream
// kWideCtaTokens keys or more: one-tile steps (four CTAs per SM) were faster there on two H100s
// (MHA 32 x 16384: 2834 -> 2805 us and 2949 -> 2786 us; MHA d-ragged -0.2% / -0.1%), while
// shorter MHA CTAs went either way (d-b64 +0.8% / -0.8%; docs/perf-notes.md, CUDA decode v34).
bool use_pair_steps(const GridFill& g, const DecodePlan& plan, std::int64_t group) {
  const bool long_mha = group < 4 && plan.cta_tokens >= kWideCtaTokens;
  return detail::env_switch("PAGEDATTN_DECODE_PAIRS", !long_mha && (g.ctas <= 3 * g.sms || g.ctas > 4 * g.sms));
}

// Four warps per CTA for the TMA kernel when the grid gives no SM more than one CTA (a unit
// per SM, unsplit: GQA d-mid16), where two warps alone keep too few tiles in flight to stream an
// SM's share of the bandwidth, and for a ragged batch whose longest CTAs stream kWideCtaTokens
// keys or more, whose time is their tail: four warps stream a long row
// faster. H100 (docs/perf-notes.md, CUDA decode v34): GQA d-ragged 776-781 -> 740 us with four
// warps on two machines, MHA d-ragged -0.2 to -0.4%; uniform long rows gain on one H100 and not
// on another (32 x 16384: GQA -1.5% / +0.1%, MHA -3.7% / +0.3%), and lose where four-warp CTAs
// cost the grid its single wave (64 x 16640, cascade off: 445 -> 483 us); shorter CTAs lose
// (GQA d-b64 +1.1%, d-b256 +1.4%, d-long1's 1024-token splits +7%).
// PAGEDATTN_DECODE_WIDE=0 / 1 forces two / four.
bool use_wide_ctas(const GridFill& g, const DecodePlan& plan) {
  return detail::env_switch("PAGEDATTN_DECODE_WIDE", g.ctas <= g.sms || (plan.ragged && plan.cta_tokens >= kWideCtaTokens));
}

// TMA tiles past the pipeline that each warp asks of L2 at its CTA's start. A one-wave grid
// spends a large share of each CTA's life before its pipeline is full, while every CTA asks at
// once; the burst fills DRAM's idle start. Where the grid's K/V exceed L2, what all CTAs ask at
// once is held to a quarter of L2: more crowds out lines still in use. H100 (docs/perf-notes.md,
// CUDA decode v38, v39), against no burst: GQA 1 x 32768 (256 two-warp CTAs) 3 tiles -3.3%
// (6 tiles -2%, 14 tiles +18%); GQA 16 x 4096 (128 four-warp CTAs) 3 tiles -1.5%; MHA 1 x 32768
// 3 tiles -0.6 to -1%; GQA 64 x 2048 (512 CTAs) 1 tile 0 to -1.4% (3 tiles +3%); grids of
// 2048 CTAs lose at any count and get none. GQA 1 x 8192 (34 MB, fits L2) 6 tiles -15%, 3 -7%.
// PAGEDATTN_DECODE_ENTRY_PREFETCH=0 turns it off; =N (1-32) asks N tiles on every TMA grid.
constexpr std::int64_t kEntryPrefetchL2Share = 4;  // the bursts may ask 1/4 of L2
constexpr std::int64_t kEntryPrefetchMaxTiles = 6;
constexpr std::int64_t kTmaTileKeys = 16;  // keys per tile of the TMA kernel (its kTokens)
// warps: a CTA's; key_bytes: one key's K and V rows.
int entry_prefetch_tiles(const GridFill& g, const DecodePlan& plan, int warps, std::int64_t key_bytes, int device) {
  if (const auto forced = detail::env_int("PAGEDATTN_DECODE_ENTRY_PREFETCH", 0, 32)) return *forced;
  const std::int64_t l2 = cached_device_attribute(cudaDevAttrL2CacheSize, device);
  if (g.ctas * plan.cta_tokens * key_bytes <= l2) return kEntryPrefetchMaxTiles;  // the grid's K/V, at most
  const std::int64_t per_tile = g.ctas * warps * kTmaTileKeys * key_bytes;  // one tile for every warp
  return static_cast<int>(std::min(kEntryPrefetchMaxTiles, l2 / kEntryPrefetchL2Share / std::max<std::int64_t>(1, per_tile)));
}

// Three-warp CTAs for the fp8 kernel with key rows at head_dim 128 (four such CTAs fit an SM,
// twelve warps, where four two-warp ones give it eight) where a CTA streams kFp8WideCtaTokens
// keys or more. H200, e4m3, 2 interleaved rounds against two warps (docs/perf-notes.md v50):
// GQA 256 x 2048 0.959, MHA 64 x 2048 0.947, MHA 16 x 4096 0.976, MHA 1 x 32768 (2048-key
// splits) 0.989, head_dim 96 64 x 2048 0.907, GQA 64 x 2048 and 32 x 16384 1.001; shorter CTAs
// lose (GQA 1 x 32768 in 512-key splits 1.049, 16 x 4096 in 1024-key splits 1.018): a CTA's
// tiles in three shares leave each warp fewer. On TMA tiles only grids of more than one wave of
// four three-warp CTAs per SM take them: there (v51, 2 rounds) d-b64's 512 CTAs ran 0.973x the
// time with two warps, where 2048-CTA grids lost 5-6% with two (GQA 256 x 2048, MHA 64 x 2048);
// on cp.async tiles d-b64 was even and head_dim 96's 512 CTAs gained 9% with three (v50).
// PAGEDATTN_DECODE_FP8_WIDE=0 / 1 forces two / three.
constexpr std::int64_t kFp8WideCtaTokens = 2048;
constexpr std::int64_t kFp8WideCtasPerSm = 4;
bool use_wide_fp8_ctas(const DecodePlan& plan, const GridFill& g, bool tma_tiles) {
  const bool many_waves = g.ctas > kFp8WideCtasPerSm * g.sms;
  return detail::env_switch("PAGEDATTN_DECODE_FP8_WIDE",
                            plan.cta_tokens >= kFp8WideCtaTokens && (many_waves || !tma_tiles));
}

// Programmatic dependent launch needs sm_90.
bool supports_dependent_launch(int device) {
  return cached_device_attribute(cudaDevAttrComputeCapabilityMajor, device) >= 9;
}

__device__ __forceinline__ float neg_inf() { return detail::kNegInf; }

}  // namespace

// One CTA per (sequence, query head) that was split; thread t owns dims t and t + kDecodeThreads.
// The rows of a block of kMergeBlock splits load together, and block 0's are issued with the LSE
// loads before the maximum is known: after the decode grid's writes land, merging up to
// kMergeBlock splits takes one L2 round trip.
__global__ void __launch_bounds__(kDecodeThreads) merge_splits_kernel(const __grid_constant__ DecodeKernelParams prm) {
  constexpr int kWarps = kDecodeThreads / 32;
  const detail::AttentionProblem& p = prm.p;
  const std::int64_t s = blockIdx.x, h = blockIdx.y;
  // Lengths and sinks are inputs of the decode, not its outputs: read before the wait. (Safe
  // because the decode kernel itself starts only after the work before it in the stream.)
  const std::int64_t n = num_splits_of(prm, p.pages_of(s).kv_len);
  const float sink = n > 1 && p.variant.sinks ? p.variant.sinks[h] * kLog2e : neg_inf();
  wait_for_primary_grid();
  if (n <= 1) return;  // written directly by the decode kernel
  const int D = static_cast<int>(p.head_dim), t = threadIdx.x, lane = t & 31;
  const int d0 = t, d1 = t + kDecodeThreads;
  const std::int64_t H = p.num_q_heads;
  const std::int64_t base = s * prm.max_splits * H + h;  // split i at base + i * H
  const float* lse = prm.part_lse + base;
  __shared__ float s_red[kWarps];
  __shared__ float s_w[kMergeBlock];
  float v0[kMergeBlock], v1[kMergeBlock];
  auto load_block = [&](std::int64_t b) {
#pragma unroll
    for (int i = 0; i < kMergeBlock; ++i) {
      const float* row = prm.part_o + (base + (b + i) * H) * D;
      const bool live = b + i < n;
      v0[i] = live && d0 < D ? row[d0] : 0.0f;
      v1[i] = live && d1 < D ? row[d1] : 0.0f;
    }
  };
  load_block(0);
  // Max of the split LSEs (base 2), with the sink as one more term.
  float M = sink;
  for (std::int64_t i = t; i < n; i += kDecodeThreads) M = fmaxf(M, lse[i * H]);
  for (int off = 16; off > 0; off /= 2) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
  if (lane == 0) s_red[t >> 5] = M;
  __syncthreads();
  M = s_red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) M = fmaxf(M, s_red[w]);
  float L = 0.0f, o0 = 0.0f, o1 = 0.0f;
  if (M != neg_inf()) {
    for (std::int64_t b = 0; b < n; b += kMergeBlock) {
      if (b > 0) load_block(b);
      if (t < kMergeBlock) s_w[t] = b + t < n ? exp2f(lse[(b + t) * H] - M) : 0.0f;
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kMergeBlock; ++i) {
        const float w = s_w[i];
        L += w;
        o0 = fmaf(w, v0[i], o0);
        o1 = fmaf(w, v1[i], o1);
      }
      __syncthreads();  // s_w is refilled
    }
    if (sink != neg_inf()) L += exp2f(sink - M);
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  const auto out_size = static_cast<std::int64_t>(dtype_size(p.qo.out_dtype));
  std::byte* o_row = p.qo.out + (s * p.qo.out_token_stride + h * p.qo.out_head_stride) * out_size;
  if (d0 < D) store_one(o_row, p.qo.out_dtype, d0, o0 * inv);
  if (d1 < D) store_one(o_row, p.qo.out_dtype, d1, o1 * inv);
  if (t == 0 && p.qo.lse) p.qo.lse[s * p.qo.lse_token_stride + h * p.qo.lse_head_stride] = natural_lse(M, L);
}

// The merge for plans of few splits (at most kRowMergeSplits): one warp per (sequence, query
// head), lane l owning dims 4l.. and 128 + 4l.. as float4s; every split's LSE and rows are
// loaded at once, so a row takes one L2 round trip after the wait, and a CTA merges
// kRowMergeWarps rows. The CTA-per-row kernel above takes a whole CTA for every row: with
// thousands of rows its grid runs in waves of latency-bound CTAs (H100, GQA 32/8 bf16, two
// splits each: 64 x 2048 tokens 10 us of merge, 256 x 1024 39 us).
constexpr int kRowMergeSplits = 8;
constexpr int kRowMergeWarps = 8;

__global__ void __launch_bounds__(32 * kRowMergeWarps)
    merge_split_rows_kernel(const __grid_constant__ DecodeKernelParams prm) {
  const detail::AttentionProblem& p = prm.p;
  const std::int64_t H = p.num_q_heads;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowMergeWarps + threadIdx.x / 32;
  const bool live_row = row < p.num_seqs * H;
  const std::int64_t s = live_row ? row / H : 0, h = live_row ? row % H : 0;
  // Inputs of the decode, not its outputs: read before the wait (as in merge_splits_kernel).
  const std::int64_t n = live_row ? num_splits_of(prm, p.pages_of(s).kv_len) : 0;
  const float sink = n > 1 && p.variant.sinks ? p.variant.sinks[h] * kLog2e : neg_inf();
  wait_for_primary_grid();
  if (n <= 1) return;  // no row, or one written directly by the decode kernel
  const int D = static_cast<int>(p.head_dim), lane = threadIdx.x & 31;
  const int d0 = 4 * lane, d1 = 128 + 4 * lane;
  const std::int64_t base = s * prm.max_splits * H + h;  // split i at base + i * H
  float lse[kRowMergeSplits];
  float4 v0[kRowMergeSplits], v1[kRowMergeSplits];
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int i = 0; i < kRowMergeSplits; ++i) {
    const bool live = i < n;
    const float* split_row = prm.part_o + (base + i * H) * D;
    lse[i] = live ? prm.part_lse[base + i * H] : neg_inf();
    v0[i] = live && d0 < D ? *reinterpret_cast<const float4*>(split_row + d0) : zero;
    v1[i] = live && d1 < D ? *reinterpret_cast<const float4*>(split_row + d1) : zero;
  }
  float M = sink;  // base-2 LSEs; the sink is one more term
#pragma unroll
  for (int i = 0; i < kRowMergeSplits; ++i) M = fmaxf(M, lse[i]);
  float L = 0.0f;
  float4 o0 = zero, o1 = zero;
  if (M != neg_inf()) {
#pragma unroll
    for (int i = 0; i < kRowMergeSplits; ++i) {
      const float w = exp2f(lse[i] - M);  // 0 for splits past n
      L += w;
      o0 = make_float4(fmaf(w, v0[i].x, o0.x), fmaf(w, v0[i].y, o0.y), fmaf(w, v0[i].z, o0.z), fmaf(w, v0[i].w, o0.w));
      o1 = make_float4(fmaf(w, v1[i].x, o1.x), fmaf(w, v1[i].y, o1.y), fmaf(w, v1[i].z, o1.z), fmaf(w, v1[i].w, o1.w));
    }
    if (sink != neg_inf()) L += exp2f(sink - M);
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  const auto out_size = static_cast<std::int64_t>(dtype_size(p.qo.out_dtype));
  std::byte* o_row = p.qo.out + (s * p.qo.out_token_stride + h * p.qo.out_head_stride) * out_size;
  const float r0[4] = {o0.x, o0.y, o0.z, o0.w}, r1[4] = {o1.x, o1.y, o1.z, o1.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {  // head_dim is a multiple of 8: a float4 is live or not as a whole
    if (d0 < D) store_one(o_row, p.qo.out_dtype, d0 + j, r0[j] * inv);
    if (d1 < D) store_one(o_row, p.qo.out_dtype, d1 + j, r1[j] * inv);
  }
  if (lane == 0 && p.qo.lse) p.qo.lse[s * p.qo.lse_token_stride + h * p.qo.lse_head_stride] = natural_lse(M, L);
}

DecodePlan plan_decode(const detail::AttentionProblem& p, const std::int64_t* lengths,
                       const DecodeOptions& options, int device, bool tma_tiles) {
  const KernelChoice choice = choose_kernel(p, device);
  SplitShape shape;
  shape.num_seqs = p.num_seqs;
  for (std::int64_t s = 0; s < p.num_seqs; ++s) {
    shape.max_len = std::max(shape.max_len, lengths[s]);
    shape.total += lengths[s];
  }
  shape.per_seq_ctas = p.num_kv_heads * choice.head_tiles;
  shape.sms = static_cast<std::int64_t>(sm_count(device));
  shape.page_size = p.kv.page_size;
  const std::int64_t max_len = shape.max_len;
  DecodePlan plan;
  plan.tma_tiles = tma_tiles;
  // The 256-dim cp.async kernel is left to the two-per-SM plans: aiming at four per SM made it
  // 5-12% slower (H200 fp8 1 x 32768 / 16 x 4096, docs/perf-notes.md v49). fp8 on TMA tiles
  // keeps the cp.async kernel's plans: the same kernel, as many CTAs per SM.
  shape.kernel = tma_tiles_may_apply(p, plan, choice, device) && !is_fp8(p.kv.dtype) ? PlannedKernel::kTma
                 : choice.mma && mma_kernel_dim(p.head_dim) <= 128 ? PlannedKernel::kCpAsync
                                                                    : PlannedKernel::kOther;
  plan.ragged = shape.ragged();
  plan.balance_warps = detail::env_switch("PAGEDATTN_DECODE_WARP_BALANCE", !options.deterministic);
  if (options.variant == DecodeVariant::kOnePass) {
    plan.partition_tokens = whole_pages(max_len, shape.page_size);
  } else if (options.partition_size > 0) {
    plan.partition_tokens = options.partition_size;
  } else {
    // One four-warp CTA per SM beats two two-warp ones only when the warps balance their tiles;
    // with the fixed interleave it is 0.2-0.5% slower (docs/perf-notes.md, v44).
    // PAGEDATTN_DECODE_ONE_CTA_PER_SM=0 keeps two two-warp CTAs per SM. (The tensor maps are
    // encoded only for a batch the rule would take, planned for the TMA kernel.)
    const bool one_cta_per_sm = plan.balance_warps && shape.kernel == PlannedKernel::kTma &&
                                fits_one_cta_per_sm(shape) &&
                                detail::env_switch("PAGEDATTN_DECODE_ONE_CTA_PER_SM", true) &&
                                use_tma_tiles(p, plan, choice, device, nullptr);
    plan.partition_tokens = split_partition_tokens(shape, one_cta_per_sm);
    if (options.variant == DecodeVariant::kAuto && plan.partition_tokens >= max_len) {
      plan.partition_tokens = whole_pages(max_len, shape.page_size);
    }
  }
  plan.cta_tokens = std::min(max_len, plan.partition_tokens);
  plan.max_splits = max_len <= plan.partition_tokens
                        ? 1
                        : (max_len + plan.partition_tokens - 1) / plan.partition_tokens;
  check_supported(plan.max_splits <= detail::kCudaMaxGridYZ, [&] {
    return "decode on CUDA supports at most 65535 splits per sequence, got " + std::to_string(plan.max_splits) +
           " (raise the partition size)";
  });
  if (plan.max_splits > 1) {
    const std::int64_t parts = p.num_seqs * plan.max_splits * p.num_q_heads;
    plan.workspace_bytes = static_cast<std::size_t>(parts * (p.head_dim + 1)) * sizeof(float);
  }
  return plan;
}

void decode(const detail::AttentionProblem& p, const DecodePlan& plan, void* workspace,
            std::size_t workspace_bytes, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.num_seqs == 0) return;
  check_supported(p.num_seqs <= detail::kCudaMaxGridYZ, "decode on CUDA supports at most 65535 sequences per call, got " +
                                           std::to_string(p.num_seqs));
  int device = 0;
  check_cuda(cudaGetDevice(&device), "current device");
  const KernelChoice choice = choose_kernel(p, device);
  DecodeKernelParams prm;
  prm.p = p;
  prm.partition_tokens = plan.partition_tokens;
  prm.max_splits = plan.max_splits;
  prm.head_tiles = static_cast<int>(choice.head_tiles);
  prm.k_vec = prm.v_vec = choice.vec;
  prm.v_transposed = choice.vt;
  prm.page_div = FastDiv::make(static_cast<std::uint32_t>(p.kv.page_size));
  prm.speculate_pages = !detail::env_switched_off("PAGEDATTN_DECODE_PAGE_SPECULATION");
  prm.balance_warps = plan.balance_warps;

  const Workspace scratch(plan.workspace_bytes, workspace, workspace_bytes, stream, "decode");
  if (plan.workspace_bytes > 0) {
    prm.part_o = reinterpret_cast<float*>(scratch.get());
    prm.part_lse = prm.part_o + p.num_seqs * plan.max_splits * p.num_q_heads * p.head_dim;
  }
  const dim3 grid = decode_grid(plan.max_splits, p.num_kv_heads * prm.head_tiles, p.num_seqs);
  const GridFill fill = grid_fill(grid, device);
  prm.cp_async_l2_bytes = cp_async_l2_bytes(p, fill);
  const int lanes = choice.lanes, g_tile = choice.g_tile;
  const bool report = decode_report_on();
  std::string kernel;  // for the report
  if (use_tma_tiles(p, plan, choice, device, &prm)) {
#if defined(PAGEDATTN_WITH_SM90A)
    const int d = static_cast<int>(p.head_dim);
    const std::int64_t key_bytes = 2 * p.head_dim * static_cast<std::int64_t>(dtype_size(p.kv.dtype));
    if (is_fp8(p.kv.dtype)) {  // the key-rows kernel at head_dim 128 (tma_tiles_may_apply)
      const bool fp8_wide = use_wide_fp8_ctas(plan, fill, true);
      prm.entry_prefetch_tiles =
          entry_prefetch_tiles(fill, plan, fp8_wide ? kFp8WideWarps : kMmaDecodeWarps, key_bytes, device);
      if (report) {
        kernel = std::string("tensor-core TMA, key rows, fp8 rows") + (fp8_wide ? ", 3 warps" : ", 2 warps") +
                 ", entry prefetch " + std::to_string(prm.entry_prefetch_tiles);
      }
      if (p.kv.dtype == DType::kF8E4M3) launch_paged_decode_mma<Fp8E4M3, __half, true>(prm, d, true, fp8_wide, true, grid, stream);
      else launch_paged_decode_mma<Fp8E5M2, __half, true>(prm, d, true, fp8_wide, true, grid, stream);
    } else {
      const bool pairs = use_pair_steps(fill, plan, p.group_size()), wide = use_wide_ctas(fill, plan);
      prm.entry_prefetch_tiles = entry_prefetch_tiles(fill, plan, wide ? kWideWarps : kMmaDecodeWarps, key_bytes, device);
      const bool rows = choice.key_rows;
      if (report) {
        kernel = std::string("tensor-core TMA") + (rows ? ", key rows" : ", head rows") +
                 (pairs ? ", 2-tile steps" : ", 1-tile steps") + (wide ? ", 4 warps" : ", 2 warps") +
                 ", entry prefetch " + std::to_string(prm.entry_prefetch_tiles) +
                 (prm.tma_whole_rows ? ", whole-row boxes" : ", 64-dim boxes");
      }
      if (p.kv.dtype == DType::kBF16) launch_paged_decode_mma<__nv_bfloat16, __nv_bfloat16, true>(prm, d, pairs, wide, rows, grid, stream);
      else launch_paged_decode_mma<__half, __half, true>(prm, d, pairs, wide, rows, grid, stream);
    }
#endif
  } else if (choice.mma) {
    const int d = static_cast<int>(p.head_dim);
    const bool rows = choice.key_rows;
    const bool fp8_wide =
        is_fp8(p.kv.dtype) && fp8_kernel_has_wide_ctas(d, rows, choice.vt) && use_wide_fp8_ctas(plan, fill, false);
    if (report) {
      kernel = std::string("tensor-core cp.async") + (rows ? ", key rows" : ", head rows") +
               (choice.vt ? ", V transposed" : "") + (fp8_wide ? ", 3 warps" : "") + ", L2 fetch " +
               std::to_string(prm.cp_async_l2_bytes) + " B";
    }
    switch (p.kv.dtype) {
      case DType::kBF16: launch_paged_decode_mma<__nv_bfloat16, __nv_bfloat16>(prm, d, false, false, rows, grid, stream); break;
      case DType::kF16: launch_paged_decode_mma<__half, __half>(prm, d, false, false, rows, grid, stream); break;
      case DType::kF8E4M3: launch_paged_decode_mma<Fp8E4M3, __half>(prm, d, true, fp8_wide, rows, grid, stream); break;
      default: launch_paged_decode_mma<Fp8E5M2, __half>(prm, d, true, fp8_wide, rows, grid, stream); break;
    }
  } else {
    launch_cuda_core(prm, lanes, g_tile, grid, stream);
    if (report) {
      kernel = "CUDA-core, " + std::to_string(lanes) + " lanes per row, " + std::to_string(g_tile) + "-head tiles" +
               (choice.vec ? ", pipelined" : ", element loads");
    }
  }
  check_launch("paged_decode_kernel", stream);
  // Few splits: a warp per row (PAGEDATTN_DECODE_ROW_MERGE=0 keeps a CTA per row, for tests).
  const bool row_merge = plan.max_splits > 1 && plan.max_splits <= kRowMergeSplits &&
                         !detail::env_switched_off("PAGEDATTN_DECODE_ROW_MERGE");
  if (report) report_decode_launch(kernel + "; " + grid_summary(grid, fill, plan, row_merge));
  if (plan.max_splits > 1) {
    // Programmatic dependent launch: the merge grid is set up while the decode grid drains and
    // waits in wait_for_primary_grid() until its partial states are written.
    const std::int64_t rows = p.num_seqs * p.num_q_heads;
    cudaLaunchConfig_t config = {};
    config.gridDim = row_merge ? dim3(static_cast<unsigned>((rows + kRowMergeWarps - 1) / kRowMergeWarps))
                               : dim3(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(p.num_q_heads));
    config.blockDim = dim3(row_merge ? 32 * kRowMergeWarps : kDecodeThreads);
    config.stream = stream;
    cudaLaunchAttribute attribute = {};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = supports_dependent_launch(device) ? 1 : 0;
    check_cuda(cudaLaunchKernelEx(&config, row_merge ? merge_split_rows_kernel : merge_splits_kernel, prm),
               row_merge ? "merge_split_rows_kernel launch" : "merge_splits_kernel launch");
    check_launch(row_merge ? "merge_split_rows_kernel" : "merge_splits_kernel", stream);
  }
}

void decode_rows_one_pass(const detail::AttentionProblem& p, bool clip_keys_to_query, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "current device");
  const KernelChoice choice = choose_kernel(p, device);
  const std::int64_t group = p.group_size();
  const int g_tile = cuda_core_g_tile(group);
  DecodeKernelParams prm;
  prm.partition_tokens = std::numeric_limits<std::int32_t>::max();  // lengths are i32: one split
  prm.max_splits = 1;
  prm.head_tiles = static_cast<int>((group + g_tile - 1) / g_tile);
  prm.k_vec = prm.v_vec = choice.vec;
  prm.page_div = FastDiv::make(static_cast<std::uint32_t>(p.kv.page_size));
  prm.clip_keys_to_query = clip_keys_to_query;
  constexpr std::int64_t kMaxRows = detail::kCudaMaxGridYZ;  // grid.z
  // Chunks move the per-row pointers below; the table's rows are reached through seq_to_row.
  check_arg(p.seq_to_row != nullptr || p.num_seqs <= kMaxRows, "decode_rows_one_pass: more than 65535 rows need seq_to_row");
  for (std::int64_t r0 = 0; r0 < p.num_seqs; r0 += kMaxRows) {
    // Rows [r0, r0 + n) as a problem of their own: every per-row pointer moves by r0 rows.
    detail::AttentionProblem chunk = p;
    chunk.num_seqs = std::min(kMaxRows, p.num_seqs - r0);
    chunk.qo.q += r0 * p.qo.q_token_stride * static_cast<std::int64_t>(dtype_size(p.qo.q_dtype));
    chunk.qo.out += r0 * p.qo.out_token_stride * static_cast<std::int64_t>(dtype_size(p.qo.out_dtype));
    if (p.qo.lse) chunk.qo.lse += r0 * p.qo.lse_token_stride;
    if (p.seq_to_row) chunk.seq_to_row += r0;
    if (p.key_pos_offset) chunk.key_pos_offset += r0;
    if (p.query_pos_end) chunk.query_pos_end += r0;
    prm.p = chunk;
    const dim3 grid = decode_grid(1, p.num_kv_heads * prm.head_tiles, chunk.num_seqs);
    launch_cuda_core(prm, choice.lanes, g_tile, grid, stream);
    check_launch("paged_decode_kernel", stream);
  }
}

}  // namespace pagedattn::cuda
