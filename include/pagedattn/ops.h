// pagedattn — the operations over a paged KV cache.
//
// Shapes use one vocabulary: num_seqs, num_q_heads, num_kv_heads (dividing num_q_heads; the
// group size is their ratio), head_dim (a multiple of 8, at most 256), page_size (>= 1).
// Queries are f32/f16/bf16; the cache is f32/f16/bf16/fp8; outputs f32/f16/bf16; LSE f32.
// Query/output views may have any token and head strides, but head_dim must be contiguous.
//
// Every op validates all of its arguments before touching memory: a rejected call throws
// pagedattn::Error naming the argument and leaves every output and cache buffer unchanged.
// LSE is the natural-log log-sum-exp of the (masked, scaled) logits; an empty sequence gives
// output 0 and LSE -inf.
//
// On CUDA (ctx.device cuda) every tensor lives on that GPU and the op is enqueued on
// ctx.stream. Ops that must validate index values (decode's page table, append_kv's slots,
// copy_blocks' page pairs) take a host copy of them in their options instead of reading the
// GPU: they never synchronise and can be captured in a CUDA graph. The CUDA backend runs
// decode, prefill, cascade_decode, append_kv, copy_blocks, swap_blocks, merge_state and
// merge_states.
#pragma once

#include <cstddef>
#include <span>

#include "pagedattn/attention_params.h"
#include "pagedattn/context.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/page_table.h"
#include "pagedattn/tensor.h"

namespace pagedattn {

// ---- cache writes --------------------------------------------------------------------------

struct AppendKVOptions {
  // CUDA: a host copy of `slot_mapping` (same dtype and length; any stride). The op checks the
  // slots (range, no repeats) on this copy and the kernel reads the device tensor, so it never
  // synchronises or reads device memory from the host (safe inside a CUDA graph: a replay
  // writes whatever slots the device tensor then holds). Required on CUDA; ignored on the CPU.
  const TensorView* host_slot_mapping = nullptr;
};

// Writes token i's k[i] / v[i] ([num_tokens, num_kv_heads, head_dim]; f32/f16/bf16/fp8) into
// cache slot slot_mapping[i] (i32 or i64 [num_tokens]; slot = page * page_size + offset;
// -1 = skip; any other slot at most once). fp8 caches quantise on write with the cache's
// scales (stored = round(x / scale), computed as x * (1 / scale) in f32); k / v of the cache's
// own dtype are stored unchanged (fp8 input is taken as already quantised); fp8 input of another
// dtype is read as its plain values (a tensor carries no scale), then stored as any input is.
// CPU and CUDA store identical bytes.
void append_kv(const Context& ctx, const PagedKV& cache, const TensorView& k, const TensorView& v,
               const TensorView& slot_mapping, const AppendKVOptions& options = {});

struct CopyBlocksOptions {
  // CUDA: a host copy of `block_mapping` (same dtype and shape; any strides). The op checks the
  // page ids (range, no page written twice, no page both source and destination) on this copy
  // and the kernel reads the device tensor: no synchronisation, safe inside a CUDA graph.
  // Required on CUDA; ignored on the CPU.
  const TensorView* host_block_mapping = nullptr;
};

// Copies whole pages (K and V, every head) within the cache: block_mapping is i32/i64 [n, 2] of
// (src, dst) page ids. Used for copy-on-write; a page may not be both a source and a
// destination, and no page is written twice.
void copy_blocks(const Context& ctx, const PagedKV& cache, const TensorView& block_mapping,
                 const CopyBlocksOptions& options = {});

// Copies whole pages (K and V, every head) from `src` to `dst`: two caches of the same layout,
// dtype, page size, KV heads and head_dim (their page counts may differ) that may live on
// different devices. It is the swap-out (GPU -> host) and swap-in (host -> GPU) of preemption by
// swapping, or a copy between two pools. block_mapping: a host i32/i64 [n, 2] tensor of (src page,
// dst page); no dst page twice, and no memory both read and written or written twice: a page
// both a source and a destination when src and dst are the same cache, or pages of src and dst
// views that overlap in memory (the pages' bytes are compared, not the caches' pointers). Each
// page of K and of V must be one dense block, arranged alike in both caches (every layout as
// KVCacheSpec::make_views and PagedKV::from_stacked give it). Values are copied as stored, so fp8
// caches must give each KV head the same scale (its per-head one where a cache has per-head
// scales, else the per-tensor one; checked unless per-head scales live on a GPU, where they are
// not read). ctx: the GPU the caches are on (the
// copies are enqueued on its stream; with host memory that is not page-locked they also wait for
// the host, and only page-locked memory can be captured in a CUDA graph), or the CPU when both
// are in host memory.
void swap_blocks(const Context& ctx, const PagedKV& src, const PagedKV& dst, const TensorView& block_mapping);

// ---- attention -----------------------------------------------------------------------------

enum class DecodeVariant : unsigned char {
  kAuto,     // the backend picks from the lengths and the machine
  kOnePass,  // one pass over each sequence's KV (vLLM V1)
  kSplitK,   // KV split into partitions whose partial states are merged (vLLM V2, flash-decoding)
};

struct DecodeOptions {
  DecodeVariant variant = DecodeVariant::kAuto;
  int partition_size = 0;  // split-K tokens per partition (a multiple of page_size); 0 = planner
  // CUDA: a host copy of `table` (same format and shapes). The op validates page ids and
  // lengths and plans its split from this copy, so it never reads device memory from the host
  // (no synchronisation, safe inside a CUDA graph). Required on CUDA, where `table` itself is
  // the one on the GPU; ignored on the CPU. A graph replays correctly for new device lengths
  // and page ids within the table's shape; a sequence longer than in this copy is still read
  // whole (the plan's last split takes the keys past it), only slower.
  const PageTable* host_table = nullptr;
  // Sequences whose leading pages are the same physical pages (forks, prefix-cache hits) need
  // those pages read only once: decode looks for them in the (host) table with
  // find_shared_prefixes (shared_prefix.h) and, when that saves at least
  // cascade_min_saved_tokens KV reads, runs as cascade_decode over the layout found. Only with
  // variant kAuto and partition_size 0, without ALiBi or a sliding window (positions differ per
  // level), and on CUDA only while the stream is not being captured (a graph replay may see
  // other pages shared), when ctx.workspace, if given, is large enough, and with at most 16
  // levels. On CUDA the layout found is uploaded by an asynchronous copy through four
  // page-locked staging buffers per thread: it does not wait for the stream's work unless four
  // earlier uploads of this thread are still in flight (then it waits for the oldest). Results
  // then depend, within rounding, on which pages the batch shares (another summation order),
  // not on the other sequences' values. false: always plain.
  bool cascade = true;
  std::int64_t cascade_min_saved_tokens = 4096;
  // true (the default): the same inputs give bit-identical outputs and LSEs, run after run.
  // false lets the CUDA decode kernel's warps take a CTA's KV tiles as they free up instead of
  // in a fixed interleave (on an H100 up to ~1% faster on batches that fill the GPU in one
  // wave); which warp sums which keys then changes from run to run, and so do the results'
  // last bits. A decode that runs as a cascade, and the CPU backend, stay deterministic (see
  // README, "Results are deterministic", for what else a call's bits depend on).
  bool deterministic = true;
};

// One query per sequence, at its last position. q, out: [num_seqs, num_q_heads, head_dim];
// lse (optional): f32 [num_seqs, num_q_heads]. Every attention op (decode, prefill,
// cascade_decode) may write out over q itself (the same view: in place); any other overlap of
// out, lse and q, or of an output with itself, is rejected.
void decode(const Context& ctx, const TensorView& q, const PagedKV& cache, const PageTable& table,
            const AttentionParams& params, const TensorView& out, const TensorView& lse = {},
            const DecodeOptions& options = {});

// Workspace queries: the bytes of ctx.workspace the op needs for these same arguments (validated
// as the op validates them), 0 on the CPU and wherever the op needs none; allocate that much
// once and a captured CUDA graph of the op never allocates. decode's is the plain path's (split-K
// partial states): decode turns itself into a cascade only when a given workspace also holds the
// cascade's, and never while the stream is being captured.
std::size_t decode_workspace_bytes(const Context& ctx, const TensorView& q, const PagedKV& cache,
                                   const PageTable& table, const AttentionParams& params, const TensorView& out,
                                   const TensorView& lse = {}, const DecodeOptions& options = {});

struct PrefillOptions {
  // CUDA: host copies of `table` and `qo_indptr` (same formats and shapes). The op validates
  // them and sizes its launch from them, so it never reads device memory from the host (no
  // synchronisation, safe inside a CUDA graph). Required on CUDA; ignored on the CPU.
  const PageTable* host_table = nullptr;
  TensorView host_qo_indptr{};
};

// Ragged queries: sequence s owns queries [qo_indptr[s], qo_indptr[s+1]) (qo_indptr i32
// [num_seqs + 1]), which are the last positions of its KV (the KV already holds them). Covers
// full prefill, chunked prefill and multi-token append. q, out: [total_q, num_q_heads, head_dim];
// lse (optional): f32 [total_q, num_q_heads].
void prefill(const Context& ctx, const TensorView& q, const TensorView& qo_indptr,
             const PagedKV& cache, const PageTable& table, const AttentionParams& params,
             const TensorView& out, const TensorView& lse = {}, const PrefillOptions& options = {});
std::size_t prefill_workspace_bytes(const Context& ctx, const TensorView& q, const TensorView& qo_indptr,
                                    const PagedKV& cache, const PageTable& table, const AttentionParams& params,
                                    const TensorView& out, const TensorView& lse = {},
                                    const PrefillOptions& options = {});

// Cascade decode: each sequence's KV is the concatenation, level by level, of one row of each
// level's page table. seq_to_row: i32 [num_seqs] naming the row of `table` this sequence uses
// (-1: none at this level); absent means row s for sequence s. Rows shared by many sequences
// (a common prefix) are read once for the whole group. A sequence's query sits at the last
// position of its concatenated KV.
struct CascadeLevel {
  PageTable table;
  TensorView seq_to_row;
};
struct CascadeOptions {
  // CUDA: host copies of `levels` (same formats and shapes; seq_to_row given for the same
  // levels). The op validates them and plans its launches from them, so it never reads device
  // memory from the host. Rows and positions are read on the device, so a captured graph
  // replays correctly for new page ids, lengths and row maps within the planned bounds: no row
  // longer and no row with more users than in the host copies, row maps within the rows (the
  // device values are not checked again: beyond these bounds the results are undefined).
  // Required on CUDA; ignored on the CPU.
  std::span<const CascadeLevel> host_levels;
};
void cascade_decode(const Context& ctx, const TensorView& q, const PagedKV& cache,
                    std::span<const CascadeLevel> levels, const AttentionParams& params,
                    const TensorView& out, const TensorView& lse = {},
                    const CascadeOptions& options = {});
std::size_t cascade_decode_workspace_bytes(const Context& ctx, const TensorView& q, const PagedKV& cache,
                                           std::span<const CascadeLevel> levels, const AttentionParams& params,
                                           const TensorView& out, const TensorView& lse = {},
                                           const CascadeOptions& options = {});

// ---- attention states ----------------------------------------------------------------------

// (v_a, lse_a) (+) (v_b, lse_b): v [n, num_heads, head_dim] (f32/f16/bf16, contiguous along
// head_dim), lse f32 [n, num_heads]. lse_out is optional. v_out may alias v_a or v_b (and
// lse_out lse_a or lse_b), element for element (the same data, dtype and strides); any other
// overlap of an output with an input, or of the two outputs, is rejected. A state with LSE -inf
// is empty and contributes nothing; if both are empty the result is 0 with LSE -inf. Runs on the
// CPU and on CUDA (all tensors on the GPU; nothing is read on the host).
void merge_state(const Context& ctx, const TensorView& v_a, const TensorView& lse_a,
                 const TensorView& v_b, const TensorView& lse_b, const TensorView& v_out,
                 const TensorView& lse_out = {});

// Merges num_states states per row: v [n, num_states, num_heads, head_dim],
// lse f32 [n, num_states, num_heads] -> v_out [n, num_heads, head_dim], lse_out [n, num_heads]
// (optional). Same rules as merge_state; v_out (lse_out) may alias one state of v (lse).
void merge_states(const Context& ctx, const TensorView& v, const TensorView& lse,
                  const TensorView& v_out, const TensorView& lse_out = {});

}  // namespace pagedattn
