// Internal: the output side of the CPU decode kernel (decode_output.cpp): final normalisation
// of a work item's online-softmax state, partial states of split items, and their merge.
// Scalar and dtype-independent, so compiled once rather than per Highway target.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "cpu/decode_plan.h"

namespace pagedattn::cpu {

// The state a work item leaves behind: for each of its heads * group query heads (local index
// i = head * group + g), the running max m[i], sum l[i] and unnormalised output acc[i * D, +D).
struct DecodeState {
  std::int64_t heads = 0, group = 0, head_dim = 0;
  const float* acc = nullptr;
  const float* m = nullptr;
  const float* l = nullptr;
};

// Final output of a whole item: adds the sink, normalises, applies the fp8 V scale.
void decode_write_output(const detail::AttentionProblem& p, const DecodeWorkItem& it,
                         const DecodeState& st);

// Partial state of a split item into slot `slot` of `part`: acc (unnormalised, unscaled), then
// the (m, l) pairs; slot_floats() per slot.
void decode_write_partial(std::int64_t slot, const DecodeState& st, float* part);

// Merges a split item's partial states in slot order (deterministic) and writes the output.
// `acc` is scratch of head_dim floats.
void decode_merge(const detail::AttentionProblem& p, const DecodeMerge& mg, std::int64_t heads,
                  const float* part, float* acc);

}  // namespace pagedattn::cpu
