// pagedattn — page tables: which pages of the pool hold each sequence's tokens.
//
// Token t of sequence s lives in slot (t % page_size) of page pages(s)[t / page_size].
// Two formats describe the same thing; every op accepts either, and they convert both ways.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "pagedattn/tensor.h"

namespace pagedattn {

// vLLM / FlashAttention style. block_table: i32 [num_seqs, max_pages]; entries past a
// sequence's last used page are ignored and conventionally -1 (unallocated).
// seq_lens: i32 [num_seqs], tokens of KV per sequence (0 is legal).
struct BlockTable {
  TensorView block_table;
  TensorView seq_lens;
};

// FlashInfer style (CSR). indptr: i32 [num_seqs + 1], non-decreasing, indptr[0] == 0;
// indices: i32 [>= indptr[num_seqs]], the pages of sequence s are indices[indptr[s], indptr[s+1]);
// last_page_len: i32 [num_seqs], tokens in the last page, in [1, page_size] when the sequence
// has pages (ignored when it has none).
struct CsrPageTable {
  TensorView indptr;
  TensorView indices;
  TensorView last_page_len;
};

using PageTable = std::variant<BlockTable, CsrPageTable>;

// Host-owned page tables, the result of a conversion. view() borrows this object's storage.
struct BlockTableData {
  std::int64_t num_seqs = 0;
  std::int64_t max_pages = 0;
  std::vector<std::int32_t> block_table;  // [num_seqs, max_pages], -1 padded
  std::vector<std::int32_t> seq_lens;     // [num_seqs]
  BlockTable view();
};

struct CsrPageTableData {
  std::vector<std::int32_t> indptr;         // [num_seqs + 1]
  std::vector<std::int32_t> indices;        // [indptr.back()]
  std::vector<std::int32_t> last_page_len;  // [num_seqs]
  CsrPageTable view();
};

// Conversions between the formats (host tensors). They validate their input like the ops do.
CsrPageTableData to_csr(const BlockTable& table, std::int64_t page_size);
BlockTableData to_block_table(const CsrPageTable& table, std::int64_t page_size);

// Number of sequences a page table describes (no validation beyond the tensor ranks).
std::int64_t num_seqs(const PageTable& table);

}  // namespace pagedattn
