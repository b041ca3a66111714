// Internal: the host-side work plan of the CPU decode kernel.
//
// A work item is (sequence, range of kv heads, key range). One-pass decode has one item per
// (sequence, head range) covering every attended key; split-K cuts long key ranges into partitions
// whose partial states (o, m, l) go to scratch slots and are merged afterwards in partition
// order, so results are bit-identical run to run whatever the thread schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.h"
#include "pagedattn/ops.h"

namespace pagedattn::cpu {

struct DecodeWorkItem {
  std::int32_t seq = 0;
  std::int32_t kv_head = 0;         // heads [kv_head, kv_head + DecodePlan::heads_per_item)
  std::int64_t begin = 0, end = 0;  // keys [begin, end) of the sequence's row (row-relative)
  std::int64_t slot = -1;           // -1: the item is the whole range and writes the output;
                                    // else its partial state's scratch slot
};

// A (sequence, head range) split into `count` partitions held in slots [first_slot, +count).
struct DecodeMerge {
  std::int32_t seq = 0;
  std::int32_t kv_head = 0;
  std::int64_t first_slot = 0;
  std::int64_t count = 0;
};

struct DecodePlan {
  std::vector<DecodeWorkItem> items;  // in scheduling order (longest first)
  std::vector<DecodeMerge> merges;
  std::int64_t num_slots = 0;         // partial states, see DecodePlan::slot_floats
  std::int64_t partition_size = 0;    // tokens per partition; 0 = one pass
  // KV heads per item. When a token's heads are interleaved in memory (NHD), one item takes all
  // of them, so it streams whole contiguous token rows [num_kv_heads, head_dim] through each
  // page instead of every head striding across the same pages (which defeats the TLB and the
  // hardware prefetcher). Otherwise (HND, vLLM) one head, for more parallelism.
  std::int64_t heads_per_item = 1;

  // f32 values of one partial state: [heads_per_item][group] outputs of head_dim, then
  // [heads_per_item][group] (m, l) pairs.
  std::int64_t slot_floats(std::int64_t group, std::int64_t head_dim) const {
    return heads_per_item * group * (head_dim + 2);
  }
};

// Keys [begin, end) of sequence s's row that its decode query attends: the sliding window and
// (when set) the causal limit cut the row down to one contiguous range, so the kernel needs no
// per-token masks. Empty (begin == end) when the sequence has no KV or nothing is attended.
struct KeyRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t query_pos = 0;  // the query's position, relative to the row's first key
};
KeyRange decode_key_range(const detail::AttentionProblem& p, std::int64_t s);

// Chooses one-pass or split-K (and the partition size) from the options, the key ranges and
// the thread count, and lists the work items. Items hold all KV heads where a token's heads are
// adjacent (NHD), or wherever `heads_together` says the kernel wants them.
DecodePlan plan_decode(const detail::AttentionProblem& p, const DecodeOptions& options,
                       int num_threads, bool heads_together = false);

}  // namespace pagedattn::cpu
