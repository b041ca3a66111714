// Internal: the last step of cascade decode on CUDA, folding every sequence's partial f32 states
// (one per level or KV split) and the attention sinks into the output.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedattn/dtype.h"

namespace pagedattn::cuda {

constexpr int kMaxGatheredLevels = 16;

struct CascadeStates {
  const float* v = nullptr;    // [num_seqs, count, num_heads, head_dim]
  const float* lse = nullptr;  // [num_seqs, count, num_heads], natural log, -inf: empty
  std::int64_t count = 0;
  // Levels whose states are written only for the sequences that use one of their rows (the
  // gathered, shared levels): states [first, first + count) are empty, whatever they hold, for
  // a sequence s with map[s] < 0.
  struct Gathered {
    const std::int32_t* map = nullptr;  // device [num_seqs]
    std::int32_t first = 0, count = 0;
  };
  Gathered gathered[kMaxGatheredLevels];
  int num_gathered = 0;
};

struct CascadeOutput {
  std::byte* v = nullptr;
  DType dtype = DType::kF32;   // f32, f16 or bf16
  std::int64_t v_row_stride = 0, v_head_stride = 0;  // elements
  float* lse = nullptr;        // optional, natural log
  std::int64_t lse_row_stride = 0, lse_head_stride = 0;
};

// sinks: f32 [num_heads] logits or null. head_dim a multiple of 4, at most 256.
void fold_cascade_states(const CascadeStates& states, const float* sinks, const CascadeOutput& out,
                         std::int64_t num_seqs, std::int64_t num_heads, std::int64_t head_dim, void* stream);

}  // namespace pagedattn::cuda
