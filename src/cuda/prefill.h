// Internal: paged prefill / append on CUDA. The host checks the problem against the kernel's
// reach and sizes the grid from host-side query counts; the launch reads only device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/problem.h"

namespace pagedattn::cuda {

// Why neither tensor-core prefill kernel can run p; empty when one can.
std::string prefill_unsupported(const detail::AttentionProblem& p);
// The same, and whether the chosen kernel's shared memory fits a block of `device`.
std::string prefill_unsupported_on(const detail::AttentionProblem& p, int device);

// Gathered queries and KV splits, for the shared levels of a cascade (see PrefillKernelParams).
struct PrefillSplit {
  const std::int32_t* q_index = nullptr;  // device; null: packed query i is token i
  std::int64_t splits = 1;
  std::int64_t split_tokens = 0;          // a multiple of the geometry's tile_keys; 0 when splits == 1
  std::int64_t out_split_stride = 0, lse_split_stride = 0;
};

// Both prefill kernels come in head dims 64, 128 and 256: a head_dim runs zero-padded on the
// smallest of them that holds it.
inline int prefill_kernel_dims(std::int64_t head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }

// How the prefill kernel chosen for a problem on a device cuts the work: the Hopper kernel
// (wgmma, sm_90a) on compute capability 9.0 for bf16 / f16 caches of q's dtype (any head_dim) whose
// K and V rows are contiguous dims (NHD, HND) or in vLLM's split layout with pages of a multiple
// of 8 slots, and for fp8 caches of such rows (NHD, HND; bf16 or f16 q), with 16-byte aligned q
// rows and every K/V row's offset below 2^32 units of 8 elements, the mma.sync kernel otherwise
// (or when the environment variable PAGEDATTN_PREFILL_KERNEL is "mma").
struct PrefillGeometry {
  bool hopper = false;
  std::int64_t rows_per_cta = 0;  // packed query rows (query token x group + head)
  std::int64_t tile_keys = 0;     // keys per K/V tile: split boundaries fall on multiples of it
  std::int64_t ctas_per_sm = 0;   // that fit on one SM (registers and shared memory)
  std::int64_t cta_smem_bytes = 0;  // dynamic shared memory per CTA
};
PrefillGeometry prefill_geometry(const detail::AttentionProblem& p, int device);

// p holds device pointers (p.qo_indptr included); max_q: the most queries of one sequence,
// from the host copy of qo_indptr. Runs on the current device (the op's: core/ holds a
// ScopedDevice). Throws kUnsupported for problems the kernels do not cover.
void prefill(const detail::AttentionProblem& p, std::int64_t max_q, void* stream,
             const PrefillSplit& split = {});

// Prefill for the problems prefill_unsupported_on rejects (f32 q, a 16-bit cache of the other
// 16-bit dtype, rows the copies cannot vectorise): every query token is one row of the CUDA-core
// decode kernel (prefill_by_rows.cu). total_q: q's tokens. Needs 12 bytes of workspace per
// token (20 with key offsets): `workspace` when given (it must hold them), else allocated on
// the stream.
void prefill_by_rows(const detail::AttentionProblem& p, std::int64_t total_q, void* workspace,
                     std::size_t workspace_bytes, void* stream);
// The workspace prefill_by_rows needs for p and total_q tokens.
std::size_t prefill_by_rows_workspace_bytes(const detail::AttentionProblem& p, std::int64_t total_q);

}  // namespace pagedattn::cuda
