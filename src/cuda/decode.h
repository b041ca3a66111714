// Internal: paged decode on CUDA. The host plans from host-side lengths; the launch reads only
// device memory (no synchronisation, no allocation when a workspace is given).
#pragma once

#include <cstddef>

#include "core/problem.h"
#include "pagedattn/ops.h"

namespace pagedattn::cuda {

struct DecodePlan {
  std::int64_t partition_tokens = 0;  // KV tokens per split (a multiple of page_size)
  std::int64_t max_splits = 1;        // splits of the longest sequence
  std::size_t workspace_bytes = 0;    // f32 partial outputs and LSEs when max_splits > 1
  bool tma_tiles = true;              // false: the cp.async kernel even where TMA boxes would do
  // The tensor-core kernel's warps take a CTA's tiles as they free up (DecodeOptions::deterministic
  // false; PAGEDATTN_DECODE_WARP_BALANCE=0 / 1 forces either way) instead of a fixed interleave.
  bool balance_warps = false;
  // What the TMA kernel's shape choices read (decode.cu: use_pair_steps, use_wide_ctas): the keys
  // of the longest CTA (the longest sequence, or its split), and whether the lengths are uneven
  // (sum < 0.9 x batch x longest).
  std::int64_t cta_tokens = 0;
  bool ragged = false;
};

// `lengths` are the sequences' KV lengths, read from the host copy of the page table.
// tma_tiles false: plan for the cp.async kernel even where TMA boxes would do (plan.tma_tiles).
DecodePlan plan_decode(const detail::AttentionProblem& p, const std::int64_t* lengths,
                       const DecodeOptions& options, int device, bool tma_tiles = true);

// p holds device pointers. workspace: >= plan.workspace_bytes on the device, or null to let
// the op allocate it on the stream (stream-ordered, also legal inside graph capture).
void decode(const detail::AttentionProblem& p, const DecodePlan& plan, void* workspace,
            std::size_t workspace_bytes, void* stream);

// One pass of the CUDA-core decode kernel over every row of p (its one query each, at
// query_end(s) - 1), whatever the dtypes, layout or head_dim; with clip_keys_to_query, keys past
// that position are not attended. p.num_seqs may exceed a grid's 65535 rows (launched in
// chunks). For prefill's fallback (prefill.h: prefill_by_rows).
void decode_rows_one_pass(const detail::AttentionProblem& p, bool clip_keys_to_query, void* stream);

}  // namespace pagedattn::cuda
