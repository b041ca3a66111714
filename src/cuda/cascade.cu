// Cascade decode on CUDA: the planner, the set-up kernel, the level launches, the merge.
#include <algorithm>
#include <cmath>
#include <cub/block/block_scan.cuh>
#include <string>
#include <vector>

#include "cuda/cascade.h"
#include "cuda/cascade_merge.h"
#include "cuda/cuda_check.h"
#include "cuda/forked_stream.h"
#include "cuda/prefill.h"
#include "cuda/sm_count.h"
#include "cuda/workspace.h"
#include "pagedattn/error.h"

namespace pagedattn::cuda {

namespace {

constexpr int kSetupThreads = 1024;
// A KV split shorter than this costs more in CTA start and merge than it gains in parallelism.
constexpr std::int64_t kMinSplitTokens = 512;
// Partial states are kept for every sequence: splits are capped so that they stay within this
// (a large batch with one small sharing group would otherwise reserve gigabytes).
constexpr std::int64_t kMaxStateBytes = std::int64_t{256} << 20;
// The shared levels (a prefill) and the own levels (a decode of short rows) run side by side,
// each on part of the SMs, and both are bound by latency rather than by the GPU's throughput, so
// the SMs are shared in proportion to each side's SM time. Per-SM rates measured on an H100
// (64 x (16384 shared + 256 or 1024 own), docs/perf-notes.md, CUDA cascade v4): a 128 x 128 x
// 128 prefill tile (both products) takes ~2.5 us of an SM running one such CTA; a decode CTA
// (one sequence and KV head) takes ~2.5 us plus its bytes at ~6.4 GB/s, four CTAs sharing an SM.
constexpr double kSharedFlopsPerSmMicro = 4.0 * 128 * 128 * 128 / 2.5;
constexpr double kOwnRowMicros = 2.5;
constexpr double kOwnBytesPerMicro = 6.4e3;
constexpr double kOwnCtasPerSm = 4.0;

struct PositionsParams {
  detail::PageTableAccess tables[kMaxCascadeLevels];
  const std::int32_t* maps[kMaxCascadeLevels] = {};
  int num_levels = 0;
  std::int64_t num_seqs = 0;
  std::int64_t* key_offset = nullptr;  // [num_levels, num_seqs]: position of the level's first key
  std::int64_t* total = nullptr;       // [num_seqs]: keys over all levels
};

// Thread s of the grid's position blocks: sequence s's key offset at each level and its total
// length (only positional variants read them).
__device__ void cascade_positions(const PositionsParams& prm, std::int64_t block) {
  const std::int64_t tid = block * blockDim.x + threadIdx.x;
  if (tid >= prm.num_seqs) return;
  const std::int64_t s = tid;
  std::int64_t pos = 0;
  for (int l = 0; l < prm.num_levels; ++l) {
    prm.key_offset[l * prm.num_seqs + s] = pos;
    const std::int64_t r = prm.maps[l] ? prm.maps[l][s] : s;
    if (r >= 0) pos += prm.tables[l].row(r).kv_len;
  }
  prm.total[s] = pos;
}

// A shared level's users of each row, as a CSR (indptr [rows + 1]) over `order` [num_seqs].
struct GroupJob {
  const std::int32_t* seq_to_row = nullptr;
  std::int64_t rows = 0;
  std::int32_t *indptr = nullptr, *cursor = nullptr, *order = nullptr;
};

// One block. The order within a row is whatever the atomics give; a query's result does not
// depend on it, except with fp8 caches, where q's power-of-two scaling is chosen per 16-row
// m-tile (it only differs when some |q| >= 2^15).
__device__ void group_by_row(const GroupJob& job, std::int64_t num_seqs) {
  using Scan = cub::BlockScan<std::int32_t, kSetupThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ std::int32_t carry;
  const std::int64_t rows = job.rows;
  for (std::int64_t r = threadIdx.x; r < rows; r += kSetupThreads) job.cursor[r] = 0;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (std::int64_t s = threadIdx.x; s < num_seqs; s += kSetupThreads) {
    const std::int32_t r = job.seq_to_row[s];
    if (r >= 0) atomicAdd(&job.cursor[r], 1);
  }
  __syncthreads();
  for (std::int64_t r0 = 0; r0 < rows; r0 += kSetupThreads) {
    const std::int64_t r = r0 + threadIdx.x;
    const std::int32_t count = r < rows ? job.cursor[r] : 0;
    std::int32_t before = 0, chunk_total = 0;
    Scan(scan_storage).ExclusiveSum(count, before, chunk_total);
    if (r < rows) job.indptr[r] = job.cursor[r] = carry + before;
    __syncthreads();  // every thread has read carry
    if (threadIdx.x == 0) carry += chunk_total;
    __syncthreads();
  }
  if (threadIdx.x == 0) job.indptr[rows] = carry;
  __syncthreads();
  for (std::int64_t s = threadIdx.x; s < num_seqs; s += kSetupThreads) {
    const std::int32_t r = job.seq_to_row[s];
    if (r >= 0) job.order[atomicAdd(&job.cursor[r], 1)] = static_cast<std::int32_t>(s);
  }
}

struct SetupParams {
  PositionsParams positions;
  GroupJob groups[kMaxCascadeLevels];
  int num_groups = 0;
};

// The cascade's set-up in one launch (each launch costs microseconds of a call that takes tens):
// blocks [0, num_groups) group the users of one shared level each, the others do the positions.
__global__ void __launch_bounds__(kSetupThreads) cascade_setup_kernel(const __grid_constant__ SetupParams prm) {
  const int b = static_cast<int>(blockIdx.x);
  if (b < prm.num_groups) return group_by_row(prm.groups[b], prm.positions.num_seqs);
  cascade_positions(prm.positions, b - prm.num_groups);
}

std::size_t align_up(std::size_t x) { return (x + 255) / 256 * 256; }

bool positional(const detail::AttentionProblem& p) {
  return p.variant.alibi_slopes != nullptr || p.variant.window_left >= 0;
}

}  // namespace

CascadePlan plan_cascade(const detail::AttentionProblem& base, const std::vector<CascadeLevelDesc>& levels,
                         int device) {
  check_supported(levels.size() <= kMaxCascadeLevels,
                  "cascade_decode on CUDA supports at most " + std::to_string(kMaxCascadeLevels) +
                      " levels, got " + std::to_string(levels.size()));
  const std::int64_t S = base.num_seqs, Hq = base.num_q_heads, D = base.head_dim;
  const std::int64_t sms = sm_count(device);
  CascadePlan plan;
  std::size_t bytes = 0;
  auto reserve = [&bytes](std::size_t n) {
    const std::size_t at = bytes;
    bytes += align_up(n);
    return at;
  };
  // A level is shared when several sequences use one of its rows and the prefill covers it.
  auto level_problem = [&base](const CascadeLevelDesc& level) {
    detail::AttentionProblem p = base;
    p.table = level.table;
    p.seq_to_row = level.seq_to_row;
    p.variant.sinks = nullptr;
    return p;
  };
  std::vector<bool> shared(levels.size());
  for (std::size_t l = 0; l < levels.size(); ++l) {
    shared[l] = levels[l].max_users >= 2 && !positional(base) && prefill_unsupported_on(level_problem(levels[l]), device).empty() &&
                levels[l].table.num_rows <= detail::kCudaMaxGridYZ;
  }
  // SM time of each kind (microseconds x SMs), for the split of the SMs between them: every
  // query head attends each key of a shared level (4 flops per key and dim); an own level's CTA
  // per (sequence, KV head) reads its row's K and V once.
  const double kv_token_bytes = 2.0 * static_cast<double>(D) * static_cast<double>(dtype_size(base.kv.dtype));
  double shared_time = 0.0, own_time = 0.0;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    for (std::int64_t len : levels[l].seq_lens) {
      if (shared[l]) {
        shared_time += 4.0 * static_cast<double>(len * Hq * D) / kSharedFlopsPerSmMicro;
      } else if (len > 0) {
        own_time += static_cast<double>(base.num_kv_heads) *
                    (kOwnRowMicros + static_cast<double>(len) * kv_token_bytes / kOwnBytesPerMicro) / kOwnCtasPerSm;
      }
    }
  }
  const double shared_share = shared_time > 0.0 ? shared_time / (shared_time + own_time) : 1.0;
  std::size_t decode_bytes = 0;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    const CascadeLevelDesc& level = levels[l];
    CascadeLevelPlan lp;
    lp.state = plan.num_states;
    std::int64_t max_len = 0;
    for (std::int64_t len : level.seq_lens) max_len = std::max(max_len, len);
    const detail::AttentionProblem p = level_problem(level);
    lp.shared = shared[l];
    if (lp.shared) {
      const PrefillGeometry geometry = prefill_geometry(p, device);
      const std::int64_t rows = geometry.rows_per_cta;
      const std::int64_t tiles = (level.max_users * base.group_size() + rows - 1) / rows;
      const std::int64_t ctas = tiles * base.num_kv_heads * level.table.num_rows;
      // One wave on the shared levels' share of the SMs (more waves only add merge inputs:
      // docs/perf-notes.md, CUDA cascade); the own levels' CTAs take the other SMs meanwhile.
      const double wave = static_cast<double>(sms * geometry.ctas_per_sm) * shared_share;
      std::int64_t splits = std::max<std::int64_t>(1, std::llround(wave / static_cast<double>(std::max<std::int64_t>(1, ctas))));
      splits = std::min(splits, std::max<std::int64_t>(1, sms * geometry.ctas_per_sm / std::max<std::int64_t>(1, ctas)));
      splits = std::min(splits, std::max<std::int64_t>(1, max_len / kMinSplitTokens));
      const std::int64_t state_bytes = S * Hq * D * static_cast<std::int64_t>(sizeof(float));
      splits = std::min(splits, std::max<std::int64_t>(
                                    1, kMaxStateBytes / state_bytes / static_cast<std::int64_t>(levels.size())));
      const std::int64_t tile = geometry.tile_keys;
      lp.split_tokens = ((max_len + splits - 1) / splits + tile - 1) / tile * tile;
      lp.splits = lp.split_tokens == 0 ? 1 : std::max<std::int64_t>(1, (max_len + lp.split_tokens - 1) / lp.split_tokens);
      if (lp.splits == 1) lp.split_tokens = 0;
      lp.groups_offset = reserve(static_cast<std::size_t>(2 * level.table.num_rows + 1 + S) * sizeof(std::int32_t));
      plan.num_states += lp.splits;
    } else {
      // Beside a shared level, on the SMs its prefill leaves, the cp.async kernel ran own rows
      // of 256 tokens ~3% faster than the TMA one (H100, docs/perf-notes.md, CUDA cascade v5).
      lp.decode = plan_decode(p, level.seq_lens.data(), DecodeOptions{}, device, shared_time == 0.0);
      decode_bytes = std::max(decode_bytes, lp.decode.workspace_bytes);
      plan.num_states += 1;
    }
    plan.levels.push_back(lp);
  }
  plan.states_offset = reserve(static_cast<std::size_t>(S * plan.num_states * Hq * D) * sizeof(float));
  plan.lse_offset = reserve(static_cast<std::size_t>(S * plan.num_states * Hq) * sizeof(float));
  plan.positions_offset = reserve(static_cast<std::size_t>((static_cast<std::int64_t>(levels.size()) + 1) * S) *
                                  sizeof(std::int64_t));
  plan.decode_offset = reserve(decode_bytes);
  plan.workspace_bytes = bytes;
  return plan;
}

void cascade_decode(const detail::AttentionProblem& base, const std::vector<CascadeLevelDesc>& levels,
                    const CascadePlan& plan, void* workspace, std::size_t workspace_bytes, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const std::int64_t S = base.num_seqs, Hq = base.num_q_heads, D = base.head_dim;
  if (S == 0) return;
  check_supported(S <= detail::kCudaMaxGridYZ, "cascade_decode on CUDA supports at most 65535 sequences per call, got " +
                                  std::to_string(S));
  const Workspace scratch(plan.workspace_bytes, workspace, workspace_bytes, stream, "cascade_decode");
  unsigned char* ws = scratch.get();
  auto* states = reinterpret_cast<float*>(ws + plan.states_offset);
  auto* states_lse = reinterpret_cast<float*>(ws + plan.lse_offset);
  auto* key_offset = reinterpret_cast<std::int64_t*>(ws + plan.positions_offset);
  std::int64_t* total = key_offset + static_cast<std::int64_t>(levels.size()) * S;
  const std::int64_t n_states = plan.num_states;

  SetupParams setup;
  PositionsParams& pos = setup.positions;
  pos.num_levels = static_cast<int>(levels.size());
  pos.num_seqs = S;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    pos.tables[l] = levels[l].table;
    pos.maps[l] = levels[l].seq_to_row;
  }
  pos.key_offset = key_offset;
  pos.total = total;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    if (!plan.levels[l].shared || levels[l].groups != nullptr) continue;
    GroupJob& job = setup.groups[setup.num_groups++];
    job.seq_to_row = levels[l].seq_to_row;
    job.rows = levels[l].table.num_rows;
    job.indptr = reinterpret_cast<std::int32_t*>(ws + plan.levels[l].groups_offset);
    job.cursor = job.indptr + job.rows + 1;
    job.order = job.cursor + job.rows;
  }
  // Key positions matter only to positional variants (which never share a level); a shared
  // level's users may come grouped from the host.
  const bool positions = positional(base);
  const std::int64_t position_blocks = positions ? (S + kSetupThreads - 1) / kSetupThreads : 0;
  if (setup.num_groups + position_blocks > 0) {
    const auto blocks = static_cast<unsigned>(setup.num_groups + position_blocks);
    cascade_setup_kernel<<<blocks, kSetupThreads, 0, stream>>>(setup);
    check_launch("cascade_setup_kernel", stream);
  }

  // Levels without sharing (the sequences' own pages: a memory-bound decode) run on a second
  // stream beside the shared levels (a compute-bound prefill), so that one's CTAs fill the SMs
  // the other's wave leaves, and its tail.
  // (When the side stream is held by another capture, everything runs on the caller's stream.)
  const ForkedStream& fork = forked_stream();
  const cudaStream_t side = side_stream_usable(fork.stream, stream) ? fork.stream : stream;
  if (side != stream) {
    check_cuda(cudaEventRecord(fork.forked, stream), "cascade fork");
    check_cuda(cudaStreamWaitEvent(side, fork.forked, 0), "cascade fork");
  }
  SideJoin side_join(fork, side, stream);
  auto run_level = [&](std::size_t l) {
    const CascadeLevelDesc& level = levels[l];
    const CascadeLevelPlan& lp = plan.levels[l];
    detail::AttentionProblem p = base;
    p.table = level.table;
    p.variant.sinks = nullptr;  // the sinks enter once, in the final merge
    p.variant.causal = false;
    p.qo.out = reinterpret_cast<std::byte*>(states + lp.state * Hq * D);
    p.qo.out_dtype = DType::kF32;
    p.qo.out_token_stride = n_states * Hq * D;
    p.qo.out_head_stride = D;
    p.qo.lse = states_lse + lp.state * Hq;
    p.qo.lse_token_stride = n_states * Hq;
    p.qo.lse_head_stride = 1;
    if (lp.shared) {
      // Rows become the prefill's sequences; their users' queries are gathered by `order`.
      const std::int64_t rows = level.table.num_rows;
      const auto* indptr = level.groups ? level.groups : reinterpret_cast<const std::int32_t*>(ws + lp.groups_offset);
      const std::int32_t* order = indptr + 2 * rows + 1;
      p.num_seqs = rows;
      p.qo_indptr = indptr;
      p.seq_to_row = nullptr;
      p.key_pos_offset = nullptr;
      p.query_pos_end = nullptr;
      PrefillSplit split;
      split.q_index = order;
      split.splits = lp.splits;
      split.split_tokens = lp.split_tokens;
      split.out_split_stride = Hq * D;
      split.lse_split_stride = Hq;
      prefill(p, level.max_users, stream, split);
    } else {
      p.seq_to_row = level.seq_to_row;
      p.key_pos_offset = positions ? key_offset + static_cast<std::int64_t>(l) * S : nullptr;
      p.query_pos_end = positions ? total : nullptr;
      decode(p, lp.decode, lp.decode.workspace_bytes > 0 ? ws + plan.decode_offset : nullptr,
             lp.decode.workspace_bytes, side);
    }
  };
  // The shared levels are launched first: their CTAs (one per SM) take their share of the SMs,
  // and the decodes' CTAs fill the rest (H100, 64 x (16384 + 256): 87 us per graph replay, 101
  // the other way round, when the decode's CTAs took every SM and the prefill waited for them).
  for (std::size_t l = 0; l < levels.size(); ++l) {
    if (plan.levels[l].shared) run_level(l);
  }
  for (std::size_t l = 0; l < levels.size(); ++l) {
    if (!plan.levels[l].shared) run_level(l);
  }
  side_join.join();

  CascadeStates all;
  all.v = states;
  all.lse = states_lse;
  all.count = n_states;
  static_assert(kMaxCascadeLevels <= kMaxGatheredLevels);
  for (std::size_t l = 0; l < levels.size(); ++l) {
    if (!plan.levels[l].shared || levels[l].seq_to_row == nullptr) continue;  // no map: every sequence a user
    CascadeStates::Gathered& g = all.gathered[all.num_gathered++];
    g.map = levels[l].seq_to_row;
    g.first = static_cast<std::int32_t>(plan.levels[l].state);
    g.count = static_cast<std::int32_t>(plan.levels[l].splits);
  }
  CascadeOutput out;
  out.v = base.qo.out;
  out.dtype = base.qo.out_dtype;
  out.v_row_stride = base.qo.out_token_stride;
  out.v_head_stride = base.qo.out_head_stride;
  out.lse = base.qo.lse;
  out.lse_row_stride = base.qo.lse_token_stride;
  out.lse_head_stride = base.qo.lse_head_stride;
  fold_cascade_states(all, base.variant.sinks, out, S, Hq, D, stream);
}

}  // namespace pagedattn::cuda
