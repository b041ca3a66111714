// Internal: merging attention states (v, lse) on CUDA, for merge_state and merge_states.
// src/core/merge_ops.cpp has validated the arguments; every pointer is a device pointer. The
// launch only enqueues work on `stream` (no synchronisation, no allocation).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedattn/dtype.h"

namespace pagedattn::cuda {

// `count` states sharing one dtype and stride pattern: state i of (row r, head h) has its
// value at v + (r * v_row_stride + i * v_state_stride + h * v_head_stride) elements (head_dim
// contiguous) and its LSE (natural log) at lse[r * lse_row_stride + i * lse_state_stride +
// h * lse_head_stride]. merge_state passes two sets of one state, merge_states one set of all.
struct StateSet {
  const std::byte* v = nullptr;
  DType dtype = DType::kF32;
  std::int64_t v_row_stride = 0, v_state_stride = 0, v_head_stride = 0;
  const float* lse = nullptr;
  std::int64_t lse_row_stride = 0, lse_state_stride = 0, lse_head_stride = 0;
  std::int64_t count = 1;
};

// The merged state: v_out [rows, heads, head_dim], lse_out [rows, heads] (null: not wanted).
struct StateOut {
  std::byte* v = nullptr;
  DType dtype = DType::kF32;
  std::int64_t v_row_stride = 0, v_head_stride = 0;
  float* lse = nullptr;
  std::int64_t lse_row_stride = 0, lse_head_stride = 0;
};

constexpr int kMaxStateSets = 2;

// out = (+) over every state of sets[0, num_sets) (num_sets <= kMaxStateSets), in order, with
// the CPU backend's arithmetic (src/cpu/merge_states.cpp). out may alias an input state
// element for element: each (row, head) reads all its inputs before writing them.
void merge_states(const StateSet* sets, int num_sets, const StateOut& out, std::int64_t num_rows,
                  std::int64_t num_heads, std::int64_t head_dim, void* stream);

}  // namespace pagedattn::cuda
