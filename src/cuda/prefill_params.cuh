// Internal (CUDA): what the prefill kernels (mma.sync and Hopper wgmma) take.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "core/problem.h"
#include "cuda/prefill.h"
#include "cuda/decode_kernel.cuh"

namespace pagedattn::cuda {

// f(std::integral_constant<int, prefill_kernel_dims(head_dim)>{}).
template <class F>
auto with_prefill_kernel_dims(std::int64_t head_dim, F&& f) {
  switch (prefill_kernel_dims(head_dim)) {
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    default: return f(std::integral_constant<int, 256>{});
  }
}

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
  // mma.sync kernel: V tiles transposed (V rows are not 16-byte runs, e.g. vLLM's split layout),
  // and then whether runs of 16 bytes of one dim's slots may be copied whole (slots contiguous,
  // runs inside pages, aligned).
  bool v_transposed = false, v_runs = false;
  // Hopper kernel: K and V pages as TMA boxes of 64 dims x one page of one head (see
  // page_tensor_map.h); when false it gathers every tile with cp.async.
  bool tma_pages = false;
  bool tma_head_inner = true;  // the maps' coordinate order: (dim, head, slot, page), else (dim, slot, head, page)
  // Hopper kernel, 16-token pages: the maps are slot-group page boxes (KVPageGroupBoxes in
  // page_tensor_map.h: a box is a whole page of one head, at (0, 0, 0, page_mul_g * page,
  // page_mul_h * page + head)); tiles are stored page-major (WgmmaPrefillShape).
  bool page_major = false;
  int page_mul_g = 2, page_mul_h = 0;
  CUtensorMap k_pages, v_pages;
};

// What a CTA of either prefill kernel works on: one tile of `rows` packed query rows (query
// token x group + head) of one (sequence, KV head, split), and the keys those rows need.
struct PrefillTile {
  std::int64_t s = 0, split = 0;
  int kv_head = 0, group = 1;
  std::int64_t q0 = 0, n_q = 0;  // the sequence's queries
  std::int64_t row0 = 0;         // the tile's first packed row
  detail::SeqPages pages;
  std::int64_t kv_len = 0;
  std::int64_t first_pos = 0;         // key position of query token 0
  std::int64_t t_begin = 0, t_end = 0;  // keys: up to the last row's position (causal), from the
                                        // first row's window, within the split
};

// The tile of CTA (blockIdx.x, .y, .z): row tiles run from the last rows (most keys under the
// causal mask) to the first. False when the tile lies past the sequence's queries.
__device__ __forceinline__ bool prefill_tile(const PrefillKernelParams& prm, int rows, PrefillTile& t) {
  const detail::AttentionProblem& p = prm.p;
  t.s = blockIdx.z;
  t.kv_head = static_cast<int>(blockIdx.y % p.num_kv_heads);
  t.split = blockIdx.y / p.num_kv_heads;
  t.group = static_cast<int>(p.num_q_heads / p.num_kv_heads);
  t.q0 = p.q_begin(t.s), t.n_q = p.q_end(t.s) - t.q0;
  t.row0 = (static_cast<std::int64_t>(gridDim.x) - 1 - blockIdx.x) * rows;
  if (t.row0 >= t.n_q * t.group) return false;
  t.pages = p.pages_of(t.s);
  t.kv_len = t.pages.kv_len;
  t.first_pos = p.query_end(t.s) - t.n_q - p.key_offset(t.s);
  const std::int64_t last_tok = min(t.n_q - 1, (t.row0 + rows - 1) / t.group), first_tok = t.row0 / t.group;
  t.t_end = p.variant.causal ? min(t.kv_len, t.first_pos + last_tok + 1) : t.kv_len;
  t.t_begin = 0;
  if (p.variant.window_left >= 0) t.t_begin = max(std::int64_t{0}, t.first_pos + first_tok - p.variant.window_left);
  if (prm.split_tokens > 0) {
    t.t_begin = max(t.t_begin, t.split * prm.split_tokens);
    t.t_end = min(t.t_end, (t.split + 1) * prm.split_tokens);
  }
  return true;
}

}  // namespace pagedattn::cuda
