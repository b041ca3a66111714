// Internal: the plain parameter structs at the host/kernel boundary. The public ops validate
// their arguments and resolve them into these; backends read nothing else.
// All strides are in elements of the tensor they index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "pagedattn/dtype.h"

// The accessors below run on the host and, for the CUDA backend, inside kernels.
#if defined(__CUDACC__)
#define PAGEDATTN_HD __host__ __device__ __forceinline__
#else
#define PAGEDATTN_HD inline
#endif

namespace pagedattn::detail {

// The largest gridDim.y or gridDim.z of a CUDA launch. The CUDA kernels put sequences, query
// heads and splits on those axes, so the ops reject larger counts on CUDA before launching.
inline constexpr std::int64_t kCudaMaxGridYZ = 65535;

// One of the cache's K or V tensors. Element (page, head, token, dim) is at
//   page * page_stride + head * head_stride + token * token_stride
//   + (dim / chunk_len) * chunk_stride + (dim % chunk_len) * elem_stride.
// NHD/HND and vLLM's V have chunk_len == head_dim; vLLM's K has chunk_len == x.
struct KVTensorAccess {
  std::byte* data = nullptr;
  std::int64_t page_stride = 0, head_stride = 0, token_stride = 0, chunk_stride = 0,
               elem_stride = 1;
  std::int64_t chunk_len = 0;

  PAGEDATTN_HD std::int64_t offset(std::int64_t page, std::int64_t head, std::int64_t token,
                      std::int64_t dim) const {
    return page * page_stride + head * head_stride + token * token_stride +
           (dim / chunk_len) * chunk_stride + (dim % chunk_len) * elem_stride;
  }
  // True when a token's head_dim values are contiguous in memory (NHD, HND).
  PAGEDATTN_HD bool dim_contiguous(std::int64_t head_dim) const {
    return elem_stride == 1 && (chunk_len == head_dim || chunk_stride == chunk_len);
  }
};

struct KVCacheAccess {
  KVTensorAccess k, v;
  DType dtype = DType::kBF16;
  std::int64_t num_pages = 0, page_size = 0, num_kv_heads = 0, head_dim = 0;
  float k_scale = 1.0f, v_scale = 1.0f;        // fp8 only; 1 otherwise
  const float* k_head_scales = nullptr;        // [num_kv_heads] or null
  const float* v_head_scales = nullptr;

  PAGEDATTN_HD float k_scale_of(std::int64_t head) const { return k_head_scales ? k_head_scales[head] : k_scale; }
  PAGEDATTN_HD float v_scale_of(std::int64_t head) const { return v_head_scales ? v_head_scales[head] : v_scale; }
};

// The pages and length of one row of a page table.
struct SeqPages {
  const std::int32_t* pages = nullptr;  // page j at pages[j * stride]
  std::int64_t stride = 1;
  std::int64_t kv_len = 0;

  PAGEDATTN_HD std::int64_t page(std::int64_t j) const { return pages[j * stride]; }
};

// Either page-table format, validated.
struct PageTableAccess {
  std::int64_t num_rows = 0;
  // block table
  const std::int32_t* block_table = nullptr;
  std::int64_t bt_row_stride = 0, bt_col_stride = 0;
  std::int64_t bt_cols = 0;  // entries per row (0: not known)
  const std::int32_t* seq_lens = nullptr;
  std::int64_t seq_lens_stride = 1;
  // CSR (used when block_table is null)
  const std::int32_t* indptr = nullptr;
  const std::int32_t* indices = nullptr;
  const std::int32_t* last_page_len = nullptr;
  std::int64_t page_size = 0;

  PAGEDATTN_HD SeqPages row(std::int64_t r) const {
    if (block_table != nullptr) {
      return {block_table + r * bt_row_stride, bt_col_stride, seq_lens[r * seq_lens_stride]};
    }
    const std::int64_t n = indptr[r + 1] - indptr[r];
    const std::int64_t len = n == 0 ? 0 : (n - 1) * page_size + last_page_len[r];
    return {indices + indptr[r], 1, len};
  }
};

// Queries, outputs and LSE of an attention op. Token t, head h, dim d of q is at
// q + t * q_token_stride + h * q_head_stride + d.
struct QOAccess {
  const std::byte* q = nullptr;
  DType q_dtype = DType::kBF16;
  std::int64_t q_token_stride = 0, q_head_stride = 0;
  std::byte* out = nullptr;
  DType out_dtype = DType::kBF16;
  std::int64_t out_token_stride = 0, out_head_stride = 0;
  float* lse = nullptr;  // null when not requested
  std::int64_t lse_token_stride = 0, lse_head_stride = 0;
};

struct AttentionVariant {
  float scale = 1.0f;
  bool causal = true;
  int window_left = -1;
  float soft_cap = 0.0f;
  const float* alibi_slopes = nullptr;  // [num_q_heads] or null
  const float* sinks = nullptr;         // [num_q_heads] or null
};

// An attention problem after validation: sequence s has queries [q_begin(s), q_end(s)) which
// sit at the last positions of its KV. Decode has one query per sequence (qo_indptr null).
//
// Cascade levels reuse the same struct: `seq_to_row` maps a sequence to its row of `table`
// (-1: no KV at this level), `key_pos_offset[s]` is the position of the row's first key and
// `query_pos_end[s]` is one past the sequence's last query position. When null, these default
// to identity, 0 and the row's kv_len.
struct AttentionProblem {
  std::int64_t num_seqs = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  const std::int32_t* qo_indptr = nullptr;
  QOAccess qo;
  KVCacheAccess kv;
  PageTableAccess table;
  AttentionVariant variant;
  const std::int32_t* seq_to_row = nullptr;
  const std::int64_t* key_pos_offset = nullptr;
  const std::int64_t* query_pos_end = nullptr;

  PAGEDATTN_HD std::int64_t group_size() const { return num_q_heads / num_kv_heads; }
  PAGEDATTN_HD std::int64_t q_begin(std::int64_t s) const { return qo_indptr ? qo_indptr[s] : s; }
  PAGEDATTN_HD std::int64_t q_end(std::int64_t s) const { return qo_indptr ? qo_indptr[s + 1] : s + 1; }
  PAGEDATTN_HD std::int64_t row_of(std::int64_t s) const { return seq_to_row ? seq_to_row[s] : s; }
  PAGEDATTN_HD SeqPages pages_of(std::int64_t s) const {
    const std::int64_t r = row_of(s);
    return r < 0 ? SeqPages{} : table.row(r);
  }
  PAGEDATTN_HD std::int64_t key_offset(std::int64_t s) const { return key_pos_offset ? key_pos_offset[s] : 0; }
  // One past the last query position of sequence s.
  PAGEDATTN_HD std::int64_t query_end(std::int64_t s) const {
    return query_pos_end ? query_pos_end[s] : pages_of(s).kv_len;
  }
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace pagedattn::detail
