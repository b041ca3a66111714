// find_shared_prefixes: a walk down the trie of the sequences' full pages. Sequences that agree
// on the page at the current index stay in one group; a group's run of agreeing pages becomes a
// cascade row when it pays, and the group splits where its members' pages differ.
#include "pagedattn/shared_prefix.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

#include "core/find_prefixes.h"
#include "core/validate.h"
#include "pagedattn/error.h"

namespace pagedattn {

namespace {

// A group of sequences that share pages [0, depth) (or a part of them already laid out), with
// the shared pages not yet given to a row.
struct Group {
  std::vector<std::int32_t> seqs;
  std::int64_t depth = 0;
  std::vector<std::int32_t> pending;
  std::size_t level = 0;  // the level its next shared row goes to
};

class PrefixFinder {
 public:
  PrefixFinder(const detail::PageTableAccess& table, const SharedPrefixOptions& options)
      : table_(table), page_size_(table.page_size), options_(options) {
    const std::int64_t page_size = page_size_;
    const auto n = static_cast<std::size_t>(table.num_rows);
    own_.resize(n);
    own_last_len_.assign(n, 0);
    for (std::size_t s = 0; s < n; ++s) {
      const std::int64_t len = table.row(static_cast<std::int64_t>(s)).kv_len;
      const std::int64_t pages = (len + page_size - 1) / page_size;
      pages_.push_back(pages);
      last_len_.push_back(pages == 0 ? 0 : static_cast<std::int32_t>(len - (pages - 1) * page_size));
      // Only completely filled pages can be shared: a partly filled last page is always own.
      full_.push_back(pages == 0 || last_len_.back() == page_size ? pages : pages - 1);
    }
  }

  CascadeLayout run() {
    const auto n = static_cast<std::int32_t>(table_.num_rows);
    std::vector<Group> work(1);
    for (std::int32_t s = 0; s < n; ++s) work[0].seqs.push_back(s);
    while (!work.empty()) {
      Group g = std::move(work.back());
      work.pop_back();
      visit(std::move(g), work);
    }
    return assemble();
  }

 private:
  std::int64_t num_pages(std::size_t s) const { return pages_[s]; }
  std::int32_t page(std::int32_t s, std::int64_t j) const { return static_cast<std::int32_t>(table_.row(s).page(j)); }
  // The first index in [d, end) where sequence s's page differs from the lead's (end if none).
  std::int64_t mismatch_from(const detail::SeqPages& lead, std::int32_t s, std::int64_t d, std::int64_t end) const {
    const detail::SeqPages row = table_.row(s);
    if (lead.stride == 1 && row.stride == 1) {
      // Contiguous rows: whole blocks by memcmp (vectorised; std::mismatch compares one id at a
      // time, and this scan reads every shared page of every sequence), then the block that
      // differs id by id.
      constexpr std::int64_t kBlock = 64;
      while (end - d >= kBlock &&
             std::memcmp(lead.pages + d, row.pages + d, kBlock * sizeof(std::int32_t)) == 0) {
        d += kBlock;
      }
      while (d < end && lead.pages[d] == row.pages[d]) ++d;
      return d;
    }
    while (d < end && lead.page(d) == row.page(d)) ++d;
    return d;
  }
  bool pays(std::size_t users, std::size_t pages) const {
    return users >= 2 && pages > 0 &&
           static_cast<std::int64_t>(users - 1) * static_cast<std::int64_t>(pages) * page_size_ >=
               options_.min_saved_tokens;
  }

  void visit(Group g, std::vector<Group>& work) {
    const std::int32_t lead = g.seqs.front();
    std::int64_t d = g.depth;
    if (g.seqs.size() >= 2) {
      // The run every member shares: the shortest common stretch of full pages with the lead,
      // found by contiguous scans (this walks every page of every sharing sequence).
      std::int64_t end = full_[static_cast<std::size_t>(lead)];
      const detail::SeqPages lead_row = table_.row(lead);
      for (std::int32_t s : g.seqs) {
        end = std::min(end, full_[static_cast<std::size_t>(s)]);
        if (end <= d) break;
        end = mismatch_from(lead_row, s, d, end);
      }
      end = std::max(end, d);
      g.pending.reserve(g.pending.size() + static_cast<std::size_t>(end - d));
      for (std::int64_t j = d; j < end; ++j) g.pending.push_back(static_cast<std::int32_t>(lead_row.page(j)));
      d = end;
    }
    if (pays(g.seqs.size(), g.pending.size())) {
      if (shared_.size() <= g.level) shared_.resize(g.level + 1);
      shared_[g.level].emplace_back(std::move(g.pending), g.seqs);
      g.pending.clear();
      ++g.level;
    }
    // Split where the members' pages differ; a member without a full page at d ends here.
    std::vector<std::pair<std::int32_t, std::int32_t>> next;  // (page at d, sequence)
    for (std::int32_t s : g.seqs) {
      if (full_[static_cast<std::size_t>(s)] > d) next.emplace_back(page(s, d), s);
      else set_own(s, g.pending, d);
    }
    std::sort(next.begin(), next.end());
    for (std::size_t i = 0; i < next.size();) {
      std::size_t j = i;
      while (j < next.size() && next[j].first == next[i].first) ++j;
      if (j - i == 1) {
        set_own(next[i].second, g.pending, d);
      } else {
        Group child;
        for (std::size_t k = i; k < j; ++k) child.seqs.push_back(next[k].second);
        child.depth = d;
        child.pending = g.pending;
        child.level = g.level;
        work.push_back(std::move(child));
      }
      i = j;
    }
  }

  // Sequence s's own row: shared pages no row took, then its pages from index d on.
  void set_own(std::int32_t s, const std::vector<std::int32_t>& pending, std::int64_t d) {
    const auto su = static_cast<std::size_t>(s);
    std::vector<std::int32_t>& own = own_[su];
    own.reserve(pending.size() + static_cast<std::size_t>(std::max<std::int64_t>(0, num_pages(su) - d)));
    own.assign(pending.begin(), pending.end());
    const detail::SeqPages row = table_.row(s);
    for (std::int64_t j = d; j < num_pages(su); ++j) own.push_back(static_cast<std::int32_t>(row.page(j)));
    own_last_len_[su] = d < num_pages(su) ? last_len_[su] : static_cast<std::int32_t>(page_size_);
  }

  CascadeLayout assemble() {
    const auto n = static_cast<std::size_t>(table_.num_rows);
    CascadeLayout out;
    out.levels.resize(shared_.size() + 1);
    auto add_row = [&](CascadeLayout::Level& level, const std::vector<std::int32_t>& pages, std::int32_t last_len) {
      level.table.indices.insert(level.table.indices.end(), pages.begin(), pages.end());
      level.table.indptr.push_back(static_cast<std::int32_t>(level.table.indices.size()));
      level.table.last_page_len.push_back(last_len);
      out.tokens_cascade += static_cast<std::int64_t>(pages.size() - 1) * page_size_ + last_len;
      return static_cast<std::int32_t>(level.table.last_page_len.size() - 1);
    };
    for (std::size_t l = 0; l < out.levels.size(); ++l) {
      out.levels[l].seq_to_row.assign(n, -1);
      out.levels[l].table.indptr.push_back(0);
    }
    for (std::size_t l = 0; l < shared_.size(); ++l) {
      for (const auto& [pages, seqs] : shared_[l]) {
        const std::int32_t row = add_row(out.levels[l], pages, static_cast<std::int32_t>(page_size_));
        for (std::int32_t s : seqs) out.levels[l].seq_to_row[static_cast<std::size_t>(s)] = row;
      }
    }
    CascadeLayout::Level& own_level = out.levels.back();
    for (std::size_t s = 0; s < n; ++s) {
      const std::int64_t pages = num_pages(s);
      out.tokens_plain += pages == 0 ? 0 : (pages - 1) * page_size_ + last_len_[s];
      if (own_[s].empty()) continue;  // no KV, or all of it in shared rows
      own_level.seq_to_row[s] = add_row(own_level, own_[s], own_last_len_[s]);
    }
    return out;
  }

  const detail::PageTableAccess& table_;
  std::int64_t page_size_;
  SharedPrefixOptions options_;
  std::vector<std::int64_t> pages_;      // pages of each sequence
  std::vector<std::int32_t> last_len_;   // tokens in its last page
  std::vector<std::int64_t> full_;       // leading full pages of each sequence
  // shared_[level]: (pages, sequences) of each shared row.
  std::vector<std::vector<std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>>>> shared_;
  std::vector<std::vector<std::int32_t>> own_;  // every sequence gets its row from set_own
  std::vector<std::int32_t> own_last_len_;
};

}  // namespace

std::vector<CascadeLevel> CascadeLayout::views() {
  std::vector<CascadeLevel> out;
  for (Level& level : levels) {
    out.push_back({level.table.view(),
                   TensorView(level.seq_to_row.data(), DType::kI32,
                              {static_cast<std::int64_t>(level.seq_to_row.size())})});
  }
  return out;
}

CascadeLayout find_shared_prefixes(const PageTable& table, std::int64_t page_size,
                                   const SharedPrefixOptions& options) {
  check_arg(page_size >= 1, "page_size is " + std::to_string(page_size) + ", expected >= 1");
  // Validated as the ops validate their tables (on the host; ids >= 0, any i32 id being a page
  // of some pool), then searched in place. The ops take contiguous CSR tensors only: others are
  // copied into a block table first.
  const auto* csr = std::get_if<CsrPageTable>(&table);
  if (csr != nullptr && !(csr->indptr.is_contiguous() && csr->indices.is_contiguous() &&
                          csr->last_page_len.is_contiguous())) {
    BlockTableData padded = to_block_table(*csr, page_size);
    return find_shared_prefixes(padded.view(), page_size, options);
  }
  detail::KVCacheAccess pool;
  pool.page_size = page_size;
  pool.num_pages = std::int64_t{1} << 31;
  const detail::PageTableAccess access = detail::resolve_table(Context::cpu(), table, pool, "table");
  return detail::find_shared_prefixes(access, options);
}

namespace detail {

CascadeLayout find_shared_prefixes(const PageTableAccess& table, const SharedPrefixOptions& options) {
  check_arg(options.min_saved_tokens >= 0,
            "options.min_saved_tokens is " + std::to_string(options.min_saved_tokens) + ", expected >= 0");
  return PrefixFinder(table, options).run();
}

}  // namespace detail

}  // namespace pagedattn
