// The cascade benchmarks' page table: sequences whose rows start with the same physical pages.
#pragma once

#include <cstdint>
#include <vector>

#include "pagedattn/page_table.h"

namespace pagedattn::bench {

// num_seqs rows of len tokens: each row's first shared_pages entries are ids[0, shared_pages)
// (the same pages in every row), then its own own_pages ids, taken from the rest of ids in turn.
inline BlockTableData shared_prefix_table(const std::vector<std::int32_t>& ids, std::int64_t num_seqs,
                                          std::int64_t shared_pages, std::int64_t own_pages, std::int64_t len) {
  BlockTableData bt;
  bt.num_seqs = num_seqs;
  bt.max_pages = shared_pages + own_pages;
  bt.seq_lens.assign(static_cast<std::size_t>(num_seqs), static_cast<std::int32_t>(len));
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    bt.block_table.insert(bt.block_table.end(), ids.begin(), ids.begin() + shared_pages);
    const auto own = ids.begin() + shared_pages + s * own_pages;
    bt.block_table.insert(bt.block_table.end(), own, own + own_pages);
  }
  return bt;
}

}  // namespace pagedattn::bench
