// Internal: cascade decode on CUDA. Every level is attended into a partial f32 state of each
// sequence, then all states (and the sinks) are merged in one pass:
// - a level with a row shared by several sequences (and no positional variant) runs as a
//   prefill over its rows with each row's users' queries gathered into it, so the row's KV is
//   read once per group, split over the KV so that its CTAs fill its share of the SMs;
// - any other level runs as a decode over its rows, on a second stream, on the other SMs at the
//   same time (the SMs are shared in proportion to each kind's estimated SM time).
// Sequences' key positions across levels (for ALiBi and windows) are summed on the device, so
// the launches read only device memory (graph-safe when the levels live on the device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/problem.h"
#include "cuda/decode.h"
#include "pagedattn/shared_prefix.h"

namespace pagedattn::cuda {

constexpr std::size_t kMaxCascadeLevels = 16;

// One level: its page table and sequence map on the device, and what the host copies say.
struct CascadeLevelDesc {
  detail::PageTableAccess table;              // device pointers
  const std::int32_t* seq_to_row = nullptr;   // device [num_seqs]; null: row s for sequence s
  std::vector<std::int64_t> seq_lens;         // [num_seqs]: keys sequence s has at this level
  std::int64_t max_users = 0;                 // most sequences on one row
  // A shared level's users grouped by row on the host, on the device: indptr [rows + 1], then
  // [rows] unused, then the users in row order [num_seqs]. Null: the set-up kernel groups them.
  const std::int32_t* groups = nullptr;
};

struct CascadeLevelPlan {
  bool shared = false;      // runs as a gathered-query prefill
  std::int64_t state = 0;   // index of its first partial state
  std::int64_t splits = 1, split_tokens = 0;  // shared: KV splits, each a partial state
  DecodePlan decode;        // not shared
  std::size_t groups_offset = 0;  // shared: row indptr, cursors and gathered order
};

// Fills desc.seq_lens and desc.max_users from a level's validated host table and row map
// (host_map[s]: sequence s's row, -1 for none).
void describe_level(const detail::PageTableAccess& host_table, const std::int32_t* host_map, std::int64_t num_seqs,
                    CascadeLevelDesc& desc);

struct CascadePlan {
  std::vector<CascadeLevelPlan> levels;
  std::int64_t num_states = 0;
  std::size_t states_offset = 0, lse_offset = 0, positions_offset = 0, decode_offset = 0;
  std::size_t workspace_bytes = 0;
};

// base: the op's problem with device pointers (q, out, lse, cache, variant with sinks);
// base.table is unused. Throws kUnsupported for more than kMaxCascadeLevels levels.
CascadePlan plan_cascade(const detail::AttentionProblem& base, const std::vector<CascadeLevelDesc>& levels,
                         int device);

// workspace: >= plan.workspace_bytes on the device, or null to allocate it on the stream.
void cascade_decode(const detail::AttentionProblem& base, const std::vector<CascadeLevelDesc>& levels,
                    const CascadePlan& plan, void* workspace, std::size_t workspace_bytes, void* stream);

// Decode over a layout found on the host by find_shared_prefixes: its tables and row maps are
// uploaded into the workspace through a page-locked staging buffer that later calls refill (so
// not while the stream is being captured: a replayed graph would read the refilled buffer), then
// cascade_decode runs. Returns false, having enqueued nothing, when a given workspace is too
// small or the layout has more than kMaxCascadeLevels levels.
// base: the decode problem with device pointers.
bool decode_as_cascade(const detail::AttentionProblem& base, const CascadeLayout& layout, int device,
                       void* workspace, std::size_t workspace_bytes, void* stream);

bool stream_is_capturing(void* stream);

}  // namespace pagedattn::cuda
