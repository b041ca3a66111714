// Internal: the CPU backend's entry points. Arguments are validated before these are called.
#pragma once

#include "core/problem.h"
#include "pagedattn/ops.h"

namespace pagedattn::cpu {

// Optimised kernels (SIMD through Highway, threads over sequences, KV heads and splits).
void decode(const detail::AttentionProblem& p, const DecodeOptions& options, int num_threads);
void prefill(const detail::AttentionProblem& p, int num_threads);

// The double-accumulating reference for both decode (qo_indptr null) and prefill.
void reference_attention(const detail::AttentionProblem& p);

// Name of the SIMD target the runtime dispatch picked (e.g. "AVX3_DL").
const char* simd_target_name();

// Worker threads to use for a context's num_threads (0 = all hardware threads).
int resolve_num_threads(int requested);

}  // namespace pagedattn::cpu
