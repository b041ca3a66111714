// A C entry point to the FlashAttention-3 forward kernels of vLLM's fork of FlashAttention
// (github.com/vllm-project/flash-attention, hopper/), which vLLM's FLASH_ATTN backend runs for
// decode on Hopper, so that bench/fa3_decode.py can time them through ctypes without a PyTorch
// extension build. Not part of the library or its CMake build: tools/device/prepare_fa3.sh
// compiles it against a checkout of that repository and links it with the few kernel
// instantiations a bf16, head_dim 128 paged decode needs.
//
// The parameters are set the way that repository's mha_fwd() sets them for the call vLLM makes
// on a decode step: varlen queries (cu_seqlens_q, one query a sequence), seqused_k, a padded
// page table over pages of [page_size, kv_heads, head_dim], causal = true, no window, no
// soft-cap. The scheduler metadata (FlashAttention's prepare kernel: each sequence's splits and
// the tile semaphore) is either computed inside the call or taken as computed by an earlier call
// with the same lengths, which is what vLLM does: it computes the metadata once a step, in its
// attention metadata builder, and every layer's call of that step skips the prepare kernel.
// Split-KV partial results go to caller-given buffers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>

#include "cutlass/numeric_types.h"
#include "flash.h"
#include "heuristics.h"
#include "tile_size.h"

namespace {

constexpr int kPrepareVarlenMaxBatches1Cta = 992;  // as the repository's flash_api.cpp
constexpr int kHeadDim = 128;

int round_up(int x, int m) { return (x + m - 1) / m * m; }

struct Shape {
  int batch, num_heads, num_heads_k, page_size, num_pages, max_pages_per_seq, max_seqlen_k;
};

// The parameters before any buffer is attached: what the heuristics read.
Flash_fwd_params base_params(const Shape& s) {
  Flash_fwd_params p = {};
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, device);
  p.arch = prop.major * 10 + prop.minor;
  p.num_sm = prop.multiProcessorCount;
  p.is_bf16 = true;
  p.b = s.batch;
  p.h = s.num_heads;
  p.h_k = s.num_heads_k;
  p.seqlen_q = 1;
  p.seqlen_k = s.max_seqlen_k;
  p.seqlen_q_rounded = round_up(1, 128);
  p.seqlen_k_rounded = round_up(s.max_seqlen_k, 128);
  p.d = p.d_rounded = p.dv = p.dv_rounded = kHeadDim;
  p.total_q = s.batch;
  p.total_k = s.batch * s.page_size;
  p.b_k = s.batch;
  p.page_size = s.page_size;
  p.num_pages = s.num_pages;
  p.p_dropout = 1.f;
  p.rp_dropout = 1.f;
  p.p_dropout_in_uint8_t = 255;
  // causal with one query a sequence: mha_fwd keeps it for paged head_dim 128 and turns it into
  // window (seqlen_k - 1, 0).
  p.is_causal = true;
  p.window_size_left = s.max_seqlen_k - 1;
  p.window_size_right = 0;
  p.head_swizzle = true;
  p.cp_world_size = 1;
  // Varlen (cu_seqlens_q, seqused_k): the prepare kernel plans the splits per sequence.
  p.prepare_varlen_pdl = s.batch <= kPrepareVarlenMaxBatches1Cta;
  p.num_splits_dynamic_ptr = reinterpret_cast<int*>(1);  // placeholder the heuristic reads, as mha_fwd
  p.page_table = reinterpret_cast<int*>(1);             // likewise: paged
  p.pagedkv_tma = false;                                // decode: seqlen_q * group <= kBlockM
  return p;
}

int heuristic_splits(const Flash_fwd_params& p) {
  const auto tile = tile_size_fwd_sm90(p.d_rounded, p.dv_rounded, p.is_causal, p.is_local, 2, false,
                                       /*paged_kv_non_TMA=*/true, p.softcap > 0.f, use_one_mma_wg(p));
  const int block_m = std::get<0>(tile), block_n = std::get<1>(tile);
  const int n_blocks = (p.seqlen_k + block_n - 1) / block_n;
  const int m_blocks = (p.seqlen_q * (p.h / p.h_k) + block_m - 1) / block_m;
  const int size_one_kv_head = p.seqlen_k * (p.d + p.dv) * 2;
  const int total_mblocks = (p.num_splits_dynamic_ptr ? 1 : p.b) * p.h_k * m_blocks;
  return num_splits_heuristic(total_mblocks, p.num_sm, n_blocks, m_blocks, size_one_kv_head, true, 128);
}

// The scheduler metadata's layout (mha_fwd's): per-sequence vectors of round_up(batch, 4) ints
// (the prepare kernel's, the dynamic splits' where the splits are planned per sequence, the
// head swizzle's), then the tile semaphore.
struct MetadataLayout {
  bool dynamic_split;
  int batch_rounded, vectors;
  MetadataLayout(int batch, int splits)
      : dynamic_split(batch <= kPrepareVarlenMaxBatches1Cta && splits > 1),
        batch_rounded(round_up(batch, 4)),
        vectors(1 + (dynamic_split ? 1 : 0) + 1) {}
  int semaphore_offset() const { return batch_rounded * vectors; }
  int ints() const { return semaphore_offset() + 1; }
};

void set_error(char* err, int len, const char* what) {
  if (err && len > 0) std::snprintf(err, static_cast<std::size_t>(len), "%s", what);
}

}  // namespace

template <int Arch, typename T, int kHeadDim_, int kHeadDimV, bool Split, bool PagedKVNonTMA, bool Has_softcap, bool PackGQA>
void run_mha_fwd_(Flash_fwd_params& params, cudaStream_t stream);
template <typename T, typename Tpartial, int kBlockK>
void run_mha_fwd_combine_(Flash_fwd_params& params, cudaStream_t stream, bool enable_pdl);

extern "C" {

// The number of splits FlashAttention's heuristic allows for this shape (an upper bound: the
// prepare kernel may use fewer per sequence), and the metadata ints the call needs with it.
int fa3_plan(int batch, int num_heads, int num_heads_k, int page_size, int num_pages, int max_pages_per_seq,
             int max_seqlen_k, int requested_splits, int* metadata_ints_out) {
  const Shape s{batch, num_heads, num_heads_k, page_size, num_pages, max_pages_per_seq, max_seqlen_k};
  const Flash_fwd_params p = base_params(s);
  const int splits = requested_splits > 0 ? requested_splits : heuristic_splits(p);
  if (metadata_ints_out) *metadata_ints_out = MetadataLayout(batch, splits).ints();
  return splits;
}

// One decode step: q and out [batch, num_heads, 128] bf16, k and v caches [num_pages,
// page_size, num_heads_k, 128] bf16 whose pages lie page_stride elements apart (K and V may share
// a stacked pool), page_table [batch, max_pages_per_seq] int32, seqused_k
// [batch], cu_seqlens_q [batch + 1] = 0..batch, lse [num_heads, batch] f32; for splits > 1,
// out_accum [splits, num_heads, batch, 128] and lse_accum [splits, num_heads, batch] f32;
// metadata: fa3_plan's count of ints; metadata_ready: nonzero when an earlier call with the same
// lengths left it computed (the prepare kernel is then skipped, and the tile semaphore reset for
// the next call as mha_fwd does: by the combine kernel, or without splits by a memset). Returns 0,
// or -1 with a message in err.
int fa3_paged_decode(void* q, void* k, void* v, void* out, float* lse, int* cu_seqlens_q, int* seqused_k,
                     int* page_table, int batch, int num_heads, int num_heads_k, int page_size, int num_pages,
                     int max_pages_per_seq, int max_seqlen_k, long long page_stride, int splits, float* out_accum, float* lse_accum,
                     int* metadata, int metadata_ready, cudaStream_t stream, char* err, int err_len) {
  try {
    const Shape s{batch, num_heads, num_heads_k, page_size, num_pages, max_pages_per_seq, max_seqlen_k};
    Flash_fwd_params p = base_params(s);
    if (p.arch != 90) {
      set_error(err, err_len, "these FlashAttention-3 kernels are built for sm_90a only");
      return -1;
    }
    const int D = kHeadDim;
    p.q_ptr = q;
    p.k_ptr = k;
    p.v_ptr = v;
    p.o_ptr = out;
    p.q_row_stride = p.o_row_stride = static_cast<int64_t>(num_heads) * D;
    p.q_head_stride = p.o_head_stride = D;
    p.k_row_stride = p.v_row_stride = static_cast<int64_t>(num_heads_k) * D;
    p.k_head_stride = p.v_head_stride = D;
    p.k_batch_stride = p.v_batch_stride = page_stride;  // paged: a page
    p.v_dim_stride = 1;
    p.cu_seqlens_q = cu_seqlens_q;
    p.seqused_k = seqused_k;
    p.softmax_lse_ptr = lse;
    p.scale_softmax = 1.f / std::sqrt(static_cast<float>(D));
    p.page_table = page_table;
    p.page_table_batch_stride = max_pages_per_seq;
    p.num_splits = splits;
    p.pack_gqa = true;  // paged without TMA, and split: mha_fwd always packs
    const MetadataLayout layout(batch, splits);
    if (batch > kPrepareVarlenMaxBatches1Cta) p.num_splits = 1;
    p.skip_scheduler_metadata_computation = metadata_ready != 0;
    p.prepare_seqlen_q_ptr = metadata;
    p.num_splits_dynamic_ptr = layout.dynamic_split ? metadata + layout.batch_rounded : nullptr;
    p.varlen_batch_idx_ptr = nullptr;
    p.num_nheads_in_l2_ptr = metadata + layout.batch_rounded * (layout.vectors - 1);
    p.tile_count_semaphore_offset = layout.semaphore_offset();
    p.tile_count_semaphore = metadata + p.tile_count_semaphore_offset;
    if (p.num_splits > 1) {
      p.oaccum_ptr = out_accum;
      p.softmax_lseaccum_ptr = lse_accum;
      p.oaccum_split_stride = static_cast<int64_t>(num_heads) * batch * D;
      p.oaccum_head_stride = static_cast<int64_t>(batch) * D;
      p.oaccum_row_stride = D;
      p.lseaccum_split_stride = static_cast<int64_t>(num_heads) * batch;
      p.lseaccum_head_stride = batch;
      run_mha_fwd_<90, cutlass::bfloat16_t, 128, 128, true, true, false, true>(p, stream);
      run_mha_fwd_combine_<cutlass::bfloat16_t, float, 128>(p, stream, true);
    } else {
      run_mha_fwd_<90, cutlass::bfloat16_t, 128, 128, false, true, false, true>(p, stream);
      if (p.skip_scheduler_metadata_computation) cudaMemsetAsync(p.tile_count_semaphore, 0, sizeof(int), stream);
    }
    const cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess) {
      set_error(err, err_len, cudaGetErrorString(launched));
      return -1;
    }
    return 0;
  } catch (const std::exception& e) {
    set_error(err, err_len, e.what());
    return -1;
  }
}

}  // extern "C"
