// Prefill on CUDA for the problems the tensor-core kernels do not take (prefill_unsupported_on:
// f32 q, a 16-bit cache of the other 16-bit dtype, K rows not in 16-byte runs, V dims strided
// unevenly, strides past 2^31): every query token becomes one row of the CUDA-core decode
// kernel, which covers every dtype, layout, head_dim and variant. A set-up kernel maps token t
// to its sequence's table row and to one past its own position; under the causal mask the row's
// keys stop there. Complete rather than fast: each token reads its keys itself (O(queries x
// keys) loads, mostly L2 hits for the tokens of one sequence) on CUDA cores.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/decode.h"
#include "cuda/prefill.h"
#include "cuda/workspace.h"

namespace pagedattn::cuda {

namespace {

// One CTA per sequence: its tokens' table row, query end and key offset.
__global__ void query_rows_kernel(const __grid_constant__ detail::AttentionProblem p, std::int32_t* row_of_token,
                                  std::int64_t* query_end_of_token, std::int64_t* key_offset_of_token) {
  const std::int64_t s = blockIdx.x;
  const std::int64_t q0 = p.q_begin(s), n_q = p.q_end(s) - q0;
  if (n_q <= 0) return;
  const auto row = static_cast<std::int32_t>(p.row_of(s));
  const std::int64_t first_end = p.query_end(s) - n_q + 1;  // the sequence's queries are its last positions
  const std::int64_t key_offset = p.key_offset(s);
  for (std::int64_t i = threadIdx.x; i < n_q; i += blockDim.x) {
    row_of_token[q0 + i] = row;
    query_end_of_token[q0 + i] = first_end + i;
    if (key_offset_of_token) key_offset_of_token[q0 + i] = key_offset;
  }
}

}  // namespace

std::size_t prefill_by_rows_workspace_bytes(const detail::AttentionProblem& p, std::int64_t total_q) {
  if (p.num_seqs == 0 || total_q == 0) return 0;
  const bool key_offsets = p.key_pos_offset != nullptr;
  return static_cast<std::size_t>(total_q) * (sizeof(std::int64_t) * (key_offsets ? 2 : 1) + sizeof(std::int32_t));
}

void prefill_by_rows(const detail::AttentionProblem& p, std::int64_t total_q, void* workspace,
                     std::size_t workspace_bytes, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.num_seqs == 0 || total_q == 0) return;
  check_supported(p.num_seqs <= 0x7fffffff, "prefill on CUDA supports at most 2^31 - 1 sequences per call");
  const bool key_offsets = p.key_pos_offset != nullptr;
  const auto n = static_cast<std::size_t>(total_q);
  const Workspace scratch(prefill_by_rows_workspace_bytes(p, total_q), workspace, workspace_bytes, stream, "prefill");
  auto* query_end = reinterpret_cast<std::int64_t*>(scratch.get());
  std::int64_t* key_offset = key_offsets ? query_end + n : nullptr;
  auto* rows = reinterpret_cast<std::int32_t*>(query_end + n * (key_offsets ? 2 : 1));
  query_rows_kernel<<<static_cast<unsigned>(p.num_seqs), 128, 0, stream>>>(p, rows, query_end, key_offset);
  check_launch("query_rows_kernel", stream);

  detail::AttentionProblem by_rows = p;  // row t: query token t, alone
  by_rows.num_seqs = total_q;
  by_rows.qo_indptr = nullptr;
  by_rows.seq_to_row = rows;
  by_rows.query_pos_end = query_end;
  by_rows.key_pos_offset = key_offset;
  decode_rows_one_pass(by_rows, p.variant.causal, stream);
}

}  // namespace pagedattn::cuda
