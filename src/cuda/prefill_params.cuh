// Internal (CUDA): what the prefill kernels (mma.sync and Hopper wgmma) take.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "cuda/decode_kernel.cuh"

namespace pagedattn::cuda {

struct PrefillKernelParams {
  detail::AttentionProblem p;  // device pointers; p.qo_indptr on the device
  FastDiv page_div;            // by page_size
  // Gathered queries (cascade levels): packed query i reads q token q_index[i] and writes that
  // token of out and lse; null: token i.
  const std::int32_t* q_index = nullptr;
  // KV splits: grid.y is num_kv_heads * splits; split j attends keys [j, j + 1) * split_tokens
  // (a multiple of the kernel's key tile) and writes its partial state (no sinks) at out +
  // j * out_split_stride and lse + j * lse_split_stride. split_tokens 0: one split.
  std::int64_t split_tokens = 0;
  std::int64_t out_split_stride = 0, lse_split_stride = 0;
};

}  // namespace pagedattn::cuda
