// Internal: merging attention states (v, lse) on the CPU.
#pragma once

#include <cstdint>
#include <span>

#include "pagedattn/dtype.h"

namespace pagedattn::cpu {

// One attention state over [num_rows, num_heads]: v at v + row * v_row_stride +
// head * v_head_stride (+ d), lse likewise (f32).
struct StateView {
  std::byte* v = nullptr;
  DType dtype = DType::kF32;
  std::int64_t v_row_stride = 0, v_head_stride = 0;
  float* lse = nullptr;  // may be null for an output that does not want it
  std::int64_t lse_row_stride = 0, lse_head_stride = 0;
};

// out = (+) over inputs. `sinks` (null or [num_heads]) adds a state of value 0 and LSE sink[h].
// `out` may alias an input: each (row, head) reads all inputs before it writes.
void merge_states(std::span<const StateView> inputs, const StateView& out, const float* sinks,
                  std::int64_t num_rows, std::int64_t num_heads, std::int64_t head_dim,
                  int num_threads);

}  // namespace pagedattn::cpu
