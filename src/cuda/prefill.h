// Internal: paged prefill / append on CUDA. The host checks the problem against the kernel's
// reach and sizes the grid from host-side query counts; the launch reads only device memory.
#pragma once

#include <cstdint>
#include <string>

#include "core/problem.h"

namespace pagedattn::cuda {

// Why the tensor-core prefill kernel cannot run p; empty when it can.
std::string prefill_unsupported(const detail::AttentionProblem& p);

// Gathered queries and KV splits, for the shared levels of a cascade (see PrefillKernelParams).
struct PrefillSplit {
  const std::int32_t* q_index = nullptr;  // device; null: packed query i is token i
  std::int64_t splits = 1;
  std::int64_t split_tokens = 0;          // a multiple of prefill_tile_keys(); 0 when splits == 1
  std::int64_t out_split_stride = 0, lse_split_stride = 0;
};

// Keys per K/V tile: split boundaries fall on multiples of it.
std::int64_t prefill_tile_keys();
// Packed query rows (query token x group + head) per CTA.
std::int64_t prefill_rows_per_cta();
// CTAs of the bf16 / f16 head_dim 128 kernel that fit on one SM of `device` (registers and
// shared memory).
std::int64_t prefill_ctas_per_sm(int device);

// p holds device pointers (p.qo_indptr included); max_q: the most queries of one sequence,
// from the host copy of qo_indptr. Throws kUnsupported for problems the kernel does not cover.
void prefill(const detail::AttentionProblem& p, std::int64_t max_q, void* stream,
             const PrefillSplit& split = {});

}  // namespace pagedattn::cuda
