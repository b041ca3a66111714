// pagedattn — finding shared prefixes in a page table, for cascade attention.
//
// Forks and prefix-cache hits leave several sequences whose leading pages are the same physical
// pages. find_shared_prefixes() finds them from the page table alone and lays the table out as
// cascade levels (see cascade_decode in ops.h): each shared run of pages becomes one row that the
// group attends once, nested runs become deeper levels, and every sequence's remaining pages form
// its row of the last level. cascade_decode over the result equals decode over the table.
#pragma once

#include <cstdint>
#include <vector>

#include "pagedattn/ops.h"
#include "pagedattn/page_table.h"

namespace pagedattn {

struct SharedPrefixOptions {
  // A run of pages shared by u sequences becomes a level only if it saves reading at least this
  // many tokens: (u - 1) * run_tokens >= min_saved_tokens. Runs that do not pay stay with the
  // deeper runs (or the own pages) of their sequences.
  std::int64_t min_saved_tokens = 4096;
};

// Host-owned cascade levels. views() borrows this object's storage.
struct CascadeLayout {
  struct Level {
    CsrPageTableData table;
    std::vector<std::int32_t> seq_to_row;  // [num_seqs], -1: no row at this level
  };
  // Shared levels, outermost first, then the level of each sequence's own pages (always last).
  std::vector<Level> levels;
  std::int64_t tokens_plain = 0;    // KV tokens decode reads: the sum of the lengths
  std::int64_t tokens_cascade = 0;  // KV tokens the cascade reads: every row once

  std::int64_t shared_levels() const { return static_cast<std::int64_t>(levels.size()) - 1; }
  std::vector<CascadeLevel> views();
};

// Only whole pages are shared: a page joins a group's run when every member has it at the same
// index and fills it completely, so a partly filled page (sharing that would end or start inside
// a page) always stays with each sequence's own pages. The table must be on the host; it is
// validated like the ops validate theirs.
CascadeLayout find_shared_prefixes(const PageTable& table, std::int64_t page_size,
                                   const SharedPrefixOptions& options = {});

}  // namespace pagedattn
