#include "pagedattn/page_table.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/validate.h"
#include "pagedattn/error.h"

namespace pagedattn {

namespace {
void check_host_i32(const TensorView& t, const char* name, int rank) {
  check_arg(t.defined() && t.device() == Device::cpu() && t.dtype() == DType::kI32 && t.rank() == rank &&
                (t.numel() == 0 || t.data() != nullptr),
            [&] {
              return std::string(name) + " must be a host i32 tensor of rank " + std::to_string(rank) +
                     (t.defined() ? ", got " + t.describe() : ", got none");
            });
}
}  // namespace

BlockTable BlockTableData::view() {
  return {TensorView(block_table.data(), DType::kI32, {num_seqs, max_pages}),
          TensorView(seq_lens.data(), DType::kI32, {num_seqs})};
}

CsrPageTable CsrPageTableData::view() {
  return {TensorView(indptr.data(), DType::kI32, {static_cast<std::int64_t>(indptr.size())}),
          TensorView(indices.data(), DType::kI32, {static_cast<std::int64_t>(indices.size())}),
          TensorView(last_page_len.data(), DType::kI32,
                     {static_cast<std::int64_t>(last_page_len.size())})};
}

std::int64_t num_seqs(const PageTable& table) {
  if (const auto* bt = std::get_if<BlockTable>(&table)) {
    return bt->block_table.rank() == 2 ? bt->block_table.size(0) : 0;
  }
  const auto& csr = std::get<CsrPageTable>(table);
  return csr.indptr.rank() == 1 ? std::max<std::int64_t>(csr.indptr.size(0) - 1, 0) : 0;
}

CsrPageTableData to_csr(const BlockTable& table, std::int64_t page_size) {
  check_arg(page_size >= 1, [&] { return "page_size must be >= 1, got " + std::to_string(page_size); });
  check_host_i32(table.block_table, "block_table", 2);
  check_host_i32(table.seq_lens, "seq_lens", 1);
  const std::int64_t n = table.block_table.size(0), max_pages = table.block_table.size(1);
  check_arg(table.seq_lens.size(0) == n, [&] {
    return "seq_lens has " + std::to_string(table.seq_lens.size(0)) +
           " entries, expected num_seqs = " + std::to_string(n);
  });
  CsrPageTableData out;
  out.indptr.reserve(static_cast<std::size_t>(n + 1));
  out.indptr.push_back(0);
  out.last_page_len.reserve(static_cast<std::size_t>(n));
  out.indices.reserve(static_cast<std::size_t>(n * max_pages));
  // Raw strided reads: this runs over every page id of a batch, on the path of every decode
  // that looks for shared prefixes.
  const auto* bt = table.block_table.data_as<const std::int32_t>();
  const auto* lens = table.seq_lens.data_as<const std::int32_t>();
  const std::int64_t row_stride = table.block_table.stride(0), col_stride = table.block_table.stride(1);
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int64_t len = lens[s * table.seq_lens.stride(0)];
    // Not (len + page_size - 1) / page_size, which overflows for page sizes near INT64_MAX.
    const std::int64_t pages = len <= 0 ? 0 : (len - 1) / page_size + 1;
    check_arg(len >= 0 && pages <= max_pages, [&] {
      return "seq_lens[" + std::to_string(s) + "] = " + std::to_string(len) + " does not fit in " +
          std::to_string(max_pages) + " pages of " + std::to_string(page_size);
    });
    // Copy the row, then one branch-free scan for negative ids (it vectorises); the message
    // names the entry only when there is one.
    const std::size_t first = out.indices.size();
    const std::int32_t* row = bt + s * row_stride;
    if (col_stride == 1) {
      out.indices.insert(out.indices.end(), row, row + pages);
    } else {
      for (std::int64_t j = 0; j < pages; ++j) out.indices.push_back(row[j * col_stride]);
    }
    bool negative = false;
    for (std::size_t i = first; i < out.indices.size(); ++i) negative |= out.indices[i] < 0;
    for (std::int64_t j = 0; negative && j < pages; ++j) {
      const std::int32_t id = out.indices[first + static_cast<std::size_t>(j)];
      check_arg(id >= 0, [&] {
        return "block_table[" + std::to_string(s) + ", " + std::to_string(j) + "] is " + std::to_string(id) +
            " but the sequence uses that page";
      });
    }
    check_arg(out.indices.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
              "too many pages for an i32 indptr");
    out.indptr.push_back(static_cast<std::int32_t>(out.indices.size()));
    out.last_page_len.push_back(pages == 0 ? 0 : static_cast<std::int32_t>(len - (pages - 1) * page_size));
  }
  return out;
}

BlockTableData to_block_table(const CsrPageTable& table, std::int64_t page_size) {
  check_arg(page_size >= 1, [&] { return "page_size must be >= 1, got " + std::to_string(page_size); });
  check_host_i32(table.indptr, "indptr", 1);
  check_host_i32(table.indices, "indices", 1);
  check_host_i32(table.last_page_len, "last_page_len", 1);
  check_arg(table.indptr.size(0) >= 1, "indptr must have num_seqs + 1 >= 1 entries");
  const std::int64_t n = table.indptr.size(0) - 1;
  check_arg(table.last_page_len.size(0) == n, [&] {
    return "last_page_len has " + std::to_string(table.last_page_len.size(0)) +
           " entries, expected num_seqs = " + std::to_string(n);
  });
  auto at = [](const TensorView& t, std::int64_t i) {
    return static_cast<std::int64_t>(*static_cast<const std::int32_t*>(t.element_ptr({i})));
  };
  check_arg(at(table.indptr, 0) == 0, "indptr[0] must be 0");
  // Every check before the table is written: indptr, each sequence's length, which must fit its
  // i32 seq_lens entry ((count - 1) * page_size + last overflowed for large page sizes), and the
  // page ids it uses.
  BlockTableData out;
  out.num_seqs = n;
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int64_t count = at(table.indptr, s + 1) - at(table.indptr, s);
    check_arg(count >= 0 && at(table.indptr, s + 1) <= table.indices.size(0), [&] {
      return "indptr is decreasing or past the end of indices at " + std::to_string(s + 1);
    });
    out.max_pages = std::max(out.max_pages, count);
    if (count > 0) {
      const std::int64_t last = at(table.last_page_len, s);
      check_arg(last >= 1 && last <= page_size, [&] {
        return "last_page_len[" + std::to_string(s) + "] is " + std::to_string(last) + ", expected [1, " +
               std::to_string(page_size) + "]";
      });
      check_arg(detail::csr_length_fits_i32(count, page_size, last), [&] {
        return "sequence " + std::to_string(s) + " has " + std::to_string(count) + " pages of " +
               std::to_string(page_size) + " tokens and last_page_len[" + std::to_string(s) + "] = " +
               std::to_string(last) + ": its length exceeds " + std::to_string(detail::kMaxSeqLen) +
               ", the most an i32 seq_lens entry holds";
      });
    }
    // As to_csr: a used entry names a page of the pool (unused ones, past indptr[n], may hold
    // anything).
    for (std::int64_t i = at(table.indptr, s); i < at(table.indptr, s + 1); ++i) {
      const std::int64_t id = at(table.indices, i);
      check_arg(id >= 0, [&] {
        return "indices[" + std::to_string(i) + "] is " + std::to_string(id) + " but sequence " + std::to_string(s) +
               " uses that page";
      });
    }
  }
  out.block_table.assign(static_cast<std::size_t>(n * out.max_pages), -1);
  out.seq_lens.assign(static_cast<std::size_t>(n), 0);
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int64_t begin = at(table.indptr, s), count = at(table.indptr, s + 1) - begin;
    for (std::int64_t j = 0; j < count; ++j) {
      out.block_table[static_cast<std::size_t>(s * out.max_pages + j)] =
          static_cast<std::int32_t>(at(table.indices, begin + j));
    }
    if (count > 0) {
      out.seq_lens[static_cast<std::size_t>(s)] =
          static_cast<std::int32_t>((count - 1) * page_size + at(table.last_page_len, s));
    }
  }
  return out;
}

}  // namespace pagedattn
