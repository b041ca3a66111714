// KVCacheManager: focused cases for each behaviour, then a long randomised run against a
// model of what every sequence must read back from its slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "pagedattn/error.h"
#include "pagedattn/kv_cache_manager.h"

namespace pagedattn {
namespace {

KVCacheManager make(std::int64_t num_pages, std::int64_t page_size, bool caching = true) {
  return KVCacheManager({.num_pages = num_pages, .page_size = page_size, .enable_prefix_caching = caching});
}

using Tokens = std::vector<TokenId>;

Tokens iota_tokens(std::size_t n, TokenId first = 0) {
  Tokens v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

Tokens concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<PageId> pages_of(const KVCacheManager& m, SeqId s) {
  const auto p = m.pages(s);
  return {p.begin(), p.end()};
}

void expect_same_metrics(const CacheMetrics& a, const CacheMetrics& b) {
  auto fields = [](const CacheMetrics& m) {
    return std::tuple(m.pages_total, m.pages_used, m.pages_cached, m.pages_free, m.tokens_stored,
                      m.internal_fragmentation_pct, m.prefix_pages_queried, m.prefix_pages_hit);
  };
  EXPECT_EQ(fields(a), fields(b));
}

template <typename F>
void expect_error(ErrorCode code, F&& f) {
  try {
    f();
    ADD_FAILURE() << "expected Error(" << to_string(code) << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
  }
}

TEST(KVCacheManager, RejectsBadConfig) {
  expect_error(ErrorCode::kInvalidArgument, [] { make(0, 4); });
  expect_error(ErrorCode::kInvalidArgument, [] { make(8, 0); });
  expect_error(ErrorCode::kInvalidArgument, [] { make(std::int64_t{1} << 40, 4); });
}

TEST(KVCacheManager, AllocatesAndReusesFreedPagesWithoutCaching) {
  auto m = make(8, 4, /*caching=*/false);
  const auto a = m.add_sequence(iota_tokens(10));
  ASSERT_EQ(m.pages(a.id).size(), 3u);
  EXPECT_EQ(m.metrics().pages_free, 5);
  const auto first = pages_of(m, a.id);
  m.free(a.id);
  EXPECT_FALSE(m.contains(a.id));
  EXPECT_EQ(m.metrics().pages_free, 8);
  // The free list is a stack: the same pages come back.
  const auto b = m.add_sequence(iota_tokens(10, 100));
  EXPECT_TRUE(std::ranges::is_permutation(pages_of(m, b.id), first));
  // Without prefix caching nothing hits and freed pages are not kept.
  EXPECT_EQ(m.add_sequence(iota_tokens(10, 100)).num_cached_tokens, 0);
  m.free(b.id);
  EXPECT_EQ(m.metrics().pages_cached, 0);
  EXPECT_EQ(m.metrics().prefix_pages_queried, 0);
  EXPECT_NE(a.id, b.id);
  m.check_integrity();
}

TEST(KVCacheManager, MovesWithItsState) {
  auto m = make(8, 4);
  const auto a = m.add_sequence(iota_tokens(6));
  KVCacheManager moved(std::move(m));
  EXPECT_EQ(moved.page_size(), 4);
  EXPECT_EQ(moved.length(a.id), 6);
  auto other = make(2, 1);
  other = std::move(moved);
  EXPECT_EQ(other.num_pages(), 8);
  other.check_integrity();
}

TEST(KVCacheManager, EmptyPromptHoldsNoPages) {
  auto m = make(4, 4);
  const auto a = m.add_sequence({});
  EXPECT_EQ(a.num_cached_tokens, 0);
  EXPECT_TRUE(m.pages(a.id).empty());
  EXPECT_TRUE(m.append(m.fork(a.id), {}).empty());
  EXPECT_TRUE(m.append(a.id, iota_tokens(5)).empty());
  EXPECT_EQ(m.pages(a.id).size(), 2u);
  m.check_integrity();
}

TEST(KVCacheManager, PrefixHitSharesLeadingFullPages) {
  auto m = make(16, 4);
  const auto prompt = iota_tokens(14);  // 3 full pages + 2 tokens
  const auto a = m.add_sequence(prompt);
  EXPECT_EQ(a.num_cached_tokens, 0);
  const auto b = m.add_sequence(concat(prompt, {7, 7}));
  EXPECT_EQ(b.num_cached_tokens, 12);
  const auto pa = pages_of(m, a.id), pb = pages_of(m, b.id);
  EXPECT_TRUE(std::equal(pa.begin(), pa.begin() + 3, pb.begin()));
  EXPECT_NE(pa[3], pb[3]);  // the partial page is never shared by a prefix hit
  EXPECT_EQ(m.metrics().pages_used, 4 + 1);
  EXPECT_EQ(m.metrics().prefix_pages_queried, 3 + 3);
  EXPECT_EQ(m.metrics().prefix_pages_hit, 3);
  // Freed pages stay cached and hit again.
  m.free(a.id);
  m.free(b.id);
  EXPECT_EQ(m.metrics().pages_cached, 4);  // a's 3 full pages and b's 4th, now full
  const auto c = m.add_sequence(prompt);
  EXPECT_EQ(c.num_cached_tokens, 12);
  EXPECT_EQ(m.metrics().pages_cached, 1);
  m.check_integrity();
}

TEST(KVCacheManager, PrefixMatchStopsAtFirstMissAndNeedsTheWholePrefix) {
  auto m = make(32, 4);
  const auto prompt = iota_tokens(17);
  m.add_sequence(prompt);
  auto second_page_differs = prompt;
  second_page_differs[5] = 999;
  EXPECT_EQ(m.add_sequence(second_page_differs).num_cached_tokens, 4);
  // Page 1 equals the cached page 1, but the page before it differs: no hit at all.
  auto first_page_differs = prompt;
  first_page_differs[0] = 999;
  EXPECT_EQ(m.add_sequence(first_page_differs).num_cached_tokens, 0);
  m.check_integrity();
}

TEST(KVCacheManager, HitCapRecomputesTheLastPromptToken) {
  auto m = make(16, 4);
  const auto prompt = iota_tokens(8);  // exactly two full pages
  const auto a = m.add_sequence(prompt);
  const auto b = m.add_sequence(prompt);
  EXPECT_EQ(b.num_cached_tokens, 4);
  const auto pa = pages_of(m, a.id), pb = pages_of(m, b.id);
  EXPECT_EQ(pa[0], pb[0]);
  EXPECT_NE(pa[1], pb[1]);  // the recomputed token is written into a page b owns alone
  EXPECT_EQ(m.add_sequence(concat(prompt, {1})).num_cached_tokens, 8);
  EXPECT_EQ(m.add_sequence(iota_tokens(4)).num_cached_tokens, 0);
  m.check_integrity();
}

TEST(KVCacheManager, SaltSeparatesNamespaces) {
  auto m = make(16, 4);
  const auto prompt = iota_tokens(9);
  m.add_sequence(prompt, 1);
  EXPECT_EQ(m.add_sequence(prompt, 2).num_cached_tokens, 0);
  EXPECT_EQ(m.add_sequence(prompt, 1).num_cached_tokens, 8);
  EXPECT_EQ(m.add_sequence(prompt, 2).num_cached_tokens, 8);
  m.check_integrity();
}

TEST(KVCacheManager, PagesFilledByAppendAreCached) {
  auto m = make(16, 4);
  const auto a = m.add_sequence(iota_tokens(3));
  m.append(a.id, iota_tokens(6, 3));  // fills pages 0 and 1
  EXPECT_EQ(m.add_sequence(iota_tokens(10)).num_cached_tokens, 8);
  m.check_integrity();
}

TEST(KVCacheManager, ForkCopiesAPartlyFilledSharedPageOnWrite) {
  auto m = make(8, 4);
  const auto a = m.add_sequence(iota_tokens(6));
  const SeqId b = m.fork(a.id);
  EXPECT_EQ(m.length(b), 6);
  EXPECT_EQ(pages_of(m, a.id), pages_of(m, b));
  EXPECT_EQ(m.metrics().pages_used, 2);
  EXPECT_EQ(m.metrics().tokens_stored, 12);
  const PageId shared = m.pages(a.id)[1];
  const auto copies = m.append(b, Tokens{42});
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, shared);
  EXPECT_EQ(copies[0].dst, m.pages(b)[1]);
  EXPECT_NE(copies[0].dst, shared);
  EXPECT_EQ(m.pages(a.id)[1], shared);
  EXPECT_EQ(m.pages(a.id)[0], m.pages(b)[0]);
  EXPECT_EQ(m.slot(b, 6), m.pages(b)[1] * 4 + 2);
  // The parent is now the only holder of the old page: no copy.
  EXPECT_TRUE(m.append(a.id, Tokens{43, 44, 45}).empty());
  EXPECT_EQ(m.pages(a.id).size(), 3u);
  m.check_integrity();
}

TEST(KVCacheManager, ForkOfFullPagesAppendsWithoutCopy) {
  auto m = make(8, 4);
  const auto a = m.add_sequence(iota_tokens(8));
  const SeqId b = m.fork(a.id);
  EXPECT_TRUE(m.append(b, Tokens{1, 2}).empty());
  EXPECT_EQ(m.pages(b).size(), 3u);
  EXPECT_EQ(m.pages(a.id).size(), 2u);
  EXPECT_EQ(m.metrics().pages_used, 3);
  m.check_integrity();
}

TEST(KVCacheManager, EvictsLeastRecentlyUsedCachedPage) {
  auto m = make(8, 4);
  std::vector<Tokens> prompts;
  std::vector<PageId> prefix_page;
  for (TokenId i = 0; i < 3; ++i) {
    prompts.push_back(iota_tokens(5, 100 * i));
    const auto s = m.add_sequence(prompts.back());
    prefix_page.push_back(m.pages(s.id)[0]);
    m.free(s.id);
  }
  EXPECT_EQ(m.metrics().pages_cached, 3);
  // Touch prompt 0: now prompt 1's page is the least recently used.
  const auto t = m.add_sequence(prompts[0]);
  EXPECT_EQ(t.num_cached_tokens, 4);
  m.free(t.id);
  EXPECT_EQ(m.metrics().pages_free, 5);
  const auto big = m.add_sequence(iota_tokens(23, 1000));  // 6 pages: 5 free + 1 evicted
  const auto big_pages = pages_of(m, big.id);
  EXPECT_EQ(std::count(big_pages.begin(), big_pages.end(), prefix_page[1]), 1);
  EXPECT_EQ(m.metrics().pages_cached, 2);
  m.free(big.id);
  EXPECT_EQ(m.add_sequence(prompts[0]).num_cached_tokens, 4);
  EXPECT_EQ(m.add_sequence(prompts[2]).num_cached_tokens, 4);
  EXPECT_EQ(m.add_sequence(prompts[1]).num_cached_tokens, 0);
  m.check_integrity();
}

// A freed sequence's later pages are evicted before the prefix pages they extend.
TEST(KVCacheManager, EvictsTheTailOfAFreedSequenceFirst) {
  auto m = make(3, 4);
  const auto a = m.add_sequence(iota_tokens(9));
  const auto pa = pages_of(m, a.id);
  m.free(a.id);  // two cached pages, one free
  const auto pb = pages_of(m, m.add_sequence(iota_tokens(5, 100)).id);
  EXPECT_EQ(std::ranges::count(pb, pa[1]), 1);
  EXPECT_EQ(std::ranges::count(pb, pa[0]), 0);
}

// A page whose recorded parent was evicted can never hit again; a newer page with the same
// content and a live parent takes its place in the prefix index.
TEST(KVCacheManager, NewerPageReplacesEntryWithEvictedParent) {
  auto m = make(8, 4);
  const auto prompt = iota_tokens(8);
  const auto more = iota_tokens(4, 100);
  const auto a = m.add_sequence(prompt);                // pages x0, x1, both cached
  const auto b = m.add_sequence(prompt);                // hits x0; its page 1 duplicates x1
  m.append(b.id, more);                                 // e2, recorded after x1
  m.free(a.id);                                         // x1 cached
  const auto c = m.add_sequence(iota_tokens(17, 500));  // takes 4 free pages and evicts x1
  m.free(c.id);
  m.free(b.id);  // e2 cached, but its parent is gone
  m.check_integrity();
  EXPECT_EQ(m.metrics().pages_cached, 4 + 2);
  const auto f = m.add_sequence(concat(concat(prompt, more), {1}));
  EXPECT_EQ(f.num_cached_tokens, 4);
  EXPECT_EQ(m.metrics().pages_cached, 3);  // one of c's pages evicted, e2 replaced and freed
  EXPECT_EQ(m.metrics().pages_free, 1);
  m.check_integrity();
  EXPECT_EQ(m.add_sequence(concat(concat(prompt, more), {2})).num_cached_tokens, 12);
  m.check_integrity();
}

TEST(KVCacheManager, OutOfBlocksThrowsAndChangesNothing) {
  auto m = make(6, 4);
  const auto a = m.add_sequence(iota_tokens(10));  // 3 pages
  const SeqId b = m.fork(a.id);
  const auto c = m.add_sequence(iota_tokens(9, 50));  // 3 pages: pool full
  const std::vector<SeqId> all{a.id, b, c.id};
  const auto metrics = m.metrics();
  const auto table = m.block_table(all);

  EXPECT_FALSE(m.can_allocate(iota_tokens(1, 500)));
  expect_error(ErrorCode::kOutOfBlocks, [&] { m.add_sequence(iota_tokens(1, 500)); });
  EXPECT_FALSE(m.can_append(b, 1));  // copy-on-write needs a page
  expect_error(ErrorCode::kOutOfBlocks, [&] { m.append(b, Tokens{1}); });
  EXPECT_FALSE(m.can_append(c.id, 4));
  expect_error(ErrorCode::kOutOfBlocks, [&] { m.append(c.id, iota_tokens(4)); });
  EXPECT_TRUE(m.can_append(c.id, 3));  // fits in the last page

  expect_same_metrics(m.metrics(), metrics);
  const auto after = m.block_table(all);
  EXPECT_EQ(after.block_table, table.block_table);
  EXPECT_EQ(after.seq_lens, table.seq_lens);
  m.check_integrity();
  // A prefix hit needs no new page for the hit part.
  m.free(c.id);
  // 2 pages hit a's pages; the 3 new ones take the free page and evict c's 2 cached pages.
  EXPECT_TRUE(m.can_allocate(iota_tokens(17)));
  EXPECT_FALSE(m.can_allocate(iota_tokens(21)));
  EXPECT_EQ(m.add_sequence(iota_tokens(17)).num_cached_tokens, 8);
  EXPECT_EQ(m.metrics().pages_free + m.metrics().pages_cached, 0);
  m.check_integrity();
}

TEST(KVCacheManager, RejectsUnknownSequences) {
  auto m = make(4, 4);
  const auto a = m.add_sequence(iota_tokens(3));
  const SeqId bad = a.id + 17;
  const std::vector<SeqId> list{a.id, bad};
  expect_error(ErrorCode::kInvalidArgument, [&] { m.length(bad); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.pages(bad); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.slot(bad, 0); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.slot(a.id, 3); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.slot(a.id, -1); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.append(bad, Tokens{1}); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.can_append(bad, 1); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.can_append(a.id, -1); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.fork(bad); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.free(bad); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.block_table(list); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.csr(list); });
  m.free(a.id);
  expect_error(ErrorCode::kInvalidArgument, [&] { m.free(a.id); });
  EXPECT_FALSE(m.contains(a.id));
  m.check_integrity();
}

TEST(KVCacheManager, PageTablesAndSlots) {
  auto m = make(16, 4);
  const auto a = m.add_sequence(iota_tokens(9));
  const auto e = m.add_sequence({});
  const auto b = m.add_sequence(iota_tokens(4, 40));
  const std::vector<SeqId> seqs{a.id, e.id, b.id};
  const auto bt = m.block_table(seqs);
  ASSERT_EQ(bt.num_seqs, 3);
  ASSERT_EQ(bt.max_pages, 3);
  EXPECT_EQ(bt.seq_lens, (std::vector<std::int32_t>{9, 0, 4}));
  const auto pa = pages_of(m, a.id);
  EXPECT_EQ(bt.block_table,
            (std::vector<std::int32_t>{pa[0], pa[1], pa[2], -1, -1, -1, m.pages(b.id)[0], -1, -1}));
  const auto csr = m.csr(seqs);
  EXPECT_EQ(csr.indptr, (std::vector<std::int32_t>{0, 3, 3, 4}));
  EXPECT_EQ(csr.indices, (std::vector<std::int32_t>{pa[0], pa[1], pa[2], m.pages(b.id)[0]}));
  EXPECT_EQ(csr.last_page_len, (std::vector<std::int32_t>{1, 0, 4}));
  for (std::int64_t i = 0; i < 9; ++i)
    EXPECT_EQ(m.slot(a.id, i), pa[static_cast<std::size_t>(i / 4)] * 4 + i % 4);
}

TEST(KVCacheManager, FragmentationCountsSharedPagesOnce) {
  auto m = make(16, 4);
  const auto a = m.add_sequence(iota_tokens(5));  // 8 slots, 5 used
  EXPECT_DOUBLE_EQ(m.metrics().internal_fragmentation_pct, 100.0 * 3 / 8);
  const SeqId b = m.fork(a.id);
  EXPECT_DOUBLE_EQ(m.metrics().internal_fragmentation_pct, 100.0 * 3 / 8);
  m.append(b, Tokens{1, 2});  // b copies page 1 and uses 3 of its slots: 12 slots, 4 + 1 + 3 used
  EXPECT_DOUBLE_EQ(m.metrics().internal_fragmentation_pct, 100.0 * 4 / 12);
  EXPECT_EQ(m.metrics().tokens_stored, 12);
  m.free(a.id);
  m.free(b);
  EXPECT_DOUBLE_EQ(m.metrics().internal_fragmentation_pct, 0.0);
}

// ---- randomised run ----
//
// The model plays the caller: it keeps every live sequence's tokens and the contents of every
// slot of the pool (what append_kv would have written), performs the returned page copies, and
// checks that each sequence reads its own tokens back, that prefix hits point at slots that
// already hold the prompt, and that no write lands in a page another sequence holds.

struct RandomCase {
  std::int64_t num_pages;
  std::int64_t page_size;
  bool caching;
  int steps;
};

class RandomModel {
 public:
  static constexpr std::size_t kMaxSeqs = 24;  // bounds the cost of the whole-state checks

  explicit RandomModel(const RandomCase& c)
      : c_(c),
        m_(make(c.num_pages, c.page_size, c.caching)),
        kv_(static_cast<std::size_t>(c.num_pages * c.page_size), -1) {
    // Shared system prompts of odd lengths, so prompts share 0 to several full pages.
    for (std::size_t len : {11u, 14u, 7u, 19u}) system_.push_back(random_tokens(len));
  }

  void run() {
    for (int step = 0; step < c_.steps; ++step) {
      const double u = uniform_(rng_);
      if (seqs_.empty() || (u < 0.30 && seqs_.size() < kMaxSeqs)) {
        add();
      } else if (u < 0.60) {
        append();
      } else if (u < 0.68 && seqs_.size() < kMaxSeqs) {
        fork();
      } else {
        free_one();
      }
      m_.check_integrity();
      if (step % 32 == 0) check_all();
      if (::testing::Test::HasFatalFailure()) return;
    }
    // Every kind of event happened, so the run exercised what it claims to.
    EXPECT_GT(adds_, 0);
    EXPECT_GT(out_of_blocks_, 0);
    EXPECT_TRUE(c_.page_size == 1 || copies_ > 0);  // page size 1 has no partly filled page
    if (c_.caching) {
      EXPECT_GT(m_.metrics().prefix_pages_hit, 0);
      EXPECT_GT(evictions_, 0);
    }
    // Free everything: no page may leak.
    while (!seqs_.empty()) free_one();
    m_.check_integrity();
    const auto end = m_.metrics();
    EXPECT_EQ(end.pages_used, 0);
    EXPECT_EQ(end.tokens_stored, 0);
    EXPECT_EQ(end.pages_free + end.pages_cached, end.pages_total);
    EXPECT_EQ(end.internal_fragmentation_pct, 0.0);
    EXPECT_TRUE(c_.caching || end.pages_cached == 0);
  }

 private:
  Tokens random_tokens(std::size_t n) {
    Tokens v(n);
    for (auto& t : v) t = static_cast<TokenId>(rng_() % 50000);
    return v;
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(rng_() % n); }
  SeqId pick() {
    auto it = seqs_.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(below(seqs_.size())));
    return it->first;
  }

  // Writes tokens [from, len) of `seq` into their slots; the pages written must be its own.
  void write(SeqId seq, std::int64_t from) {
    const auto& tokens = seqs_.at(seq);
    std::vector<PageId> written;
    for (auto i = from; i < static_cast<std::int64_t>(tokens.size()); ++i) {
      kv_[static_cast<std::size_t>(m_.slot(seq, i))] = tokens[static_cast<std::size_t>(i)];
      written.push_back(m_.pages(seq)[static_cast<std::size_t>(i / c_.page_size)]);
    }
    expect_exclusive(seq, written);
  }

  void expect_exclusive(SeqId seq, const std::vector<PageId>& written) {
    if (written.empty()) return;
    for (const auto& [other, tokens] : seqs_) {
      if (other == seq) continue;
      for (PageId p : m_.pages(other)) {
        ASSERT_EQ(std::count(written.begin(), written.end(), p), 0)
            << "sequence " << seq << " wrote into page " << p << " held by sequence " << other;
      }
    }
  }

  void check_seq(SeqId seq) {
    const auto& tokens = seqs_.at(seq);
    ASSERT_EQ(m_.length(seq), static_cast<std::int64_t>(tokens.size()));
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      ASSERT_EQ(kv_[static_cast<std::size_t>(m_.slot(seq, static_cast<std::int64_t>(i)))], tokens[i])
          << "sequence " << seq << " token " << i;
    }
  }

  void check_all() {
    std::int64_t total = 0;
    for (const auto& [seq, tokens] : seqs_) {
      check_seq(seq);
      total += static_cast<std::int64_t>(tokens.size());
    }
    const auto mt = m_.metrics();
    EXPECT_EQ(mt.tokens_stored, total);
    EXPECT_EQ(mt.pages_used + mt.pages_cached + mt.pages_free, mt.pages_total);
    // Both page-table formats list exactly pages(seq), in order.
    std::vector<SeqId> ids;
    for (const auto& [seq, tokens] : seqs_) ids.push_back(seq);
    const auto bt = m_.block_table(ids);
    const auto csr = m_.csr(ids);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto pages = m_.pages(ids[i]);
      const auto row = bt.block_table.begin() + static_cast<std::ptrdiff_t>(i) * bt.max_pages;
      ASSERT_TRUE(std::equal(pages.begin(), pages.end(), row));
      ASSERT_TRUE(std::all_of(row + static_cast<std::ptrdiff_t>(pages.size()), row + bt.max_pages,
                              [](std::int32_t p) { return p == -1; }));
      ASSERT_TRUE(std::equal(pages.begin(), pages.end(), csr.indices.begin() + csr.indptr[i],
                             csr.indices.begin() + csr.indptr[i + 1]));
      ASSERT_EQ(bt.seq_lens[i], m_.length(ids[i]));
    }
  }

  // Before a commit that the query rejected: it must throw kOutOfBlocks and change nothing.
  template <typename F>
  void expect_rejected(F&& commit) {
    ++out_of_blocks_;
    std::vector<SeqId> ids;
    for (const auto& [seq, tokens] : seqs_) ids.push_back(seq);
    const auto metrics = m_.metrics();
    const auto table = m_.block_table(ids);
    expect_error(ErrorCode::kOutOfBlocks, commit);
    expect_same_metrics(m_.metrics(), metrics);
    EXPECT_EQ(m_.block_table(ids).block_table, table.block_table);
  }

  void add() {
    Tokens prompt;
    if (below(8) != 0) {
      const auto& sys = system_[below(system_.size())];
      const std::size_t keep = below(3) != 0 ? sys.size() : below(sys.size() + 1);
      prompt.assign(sys.begin(), sys.begin() + static_cast<std::ptrdiff_t>(keep));
    }
    const auto suffix = random_tokens(below(7));
    prompt.insert(prompt.end(), suffix.begin(), suffix.end());
    // A rare second salt keeps a second prefix-cache namespace in play.
    const std::uint64_t salt = below(8) == 0 ? 1 : 0;
    if (!m_.can_allocate(prompt, salt)) {
      expect_rejected([&] { m_.add_sequence(prompt, salt); });
      return;
    }
    const auto added = m_.add_sequence(prompt, salt);
    ++adds_;
    const auto len = static_cast<std::int64_t>(prompt.size());
    ASSERT_EQ(added.num_cached_tokens % c_.page_size, 0);
    ASSERT_TRUE(added.num_cached_tokens == 0 || added.num_cached_tokens < len);
    ASSERT_TRUE(c_.caching || added.num_cached_tokens == 0);
    ASSERT_FALSE(seqs_.contains(added.id));
    seqs_[added.id] = prompt;
    for (std::int64_t i = 0; i < added.num_cached_tokens; ++i) {  // a hit must hold the prompt's K/V
      ASSERT_EQ(kv_[static_cast<std::size_t>(m_.slot(added.id, i))], prompt[static_cast<std::size_t>(i)]);
    }
    write(added.id, added.num_cached_tokens);
    check_seq(added.id);
  }

  void append() {
    const SeqId seq = pick();
    const std::size_t n = below(4) == 0 ? below(13) : below(3);
    const auto tokens = random_tokens(n);
    if (!m_.can_append(seq, static_cast<std::int64_t>(n))) {
      expect_rejected([&] { m_.append(seq, tokens); });
      return;
    }
    const auto old_last = m_.pages(seq).empty() ? PageId{-1} : m_.pages(seq).back();
    const auto cached_before = m_.metrics().pages_cached;
    const auto copies = m_.append(seq, tokens);
    if (m_.metrics().pages_cached < cached_before) ++evictions_;
    ASSERT_LE(copies.size(), 1u);
    auto& model = seqs_.at(seq);
    const auto from = static_cast<std::int64_t>(model.size());
    std::vector<PageId> written;
    for (const PageCopy& c : copies) {
      ++copies_;
      ASSERT_EQ(c.src, old_last);
      ASSERT_EQ(c.dst, m_.pages(seq)[static_cast<std::size_t>(from / c_.page_size)]);
      ASSERT_NE(from % c_.page_size, 0);
      std::copy_n(kv_.begin() + c.src * c_.page_size, c_.page_size, kv_.begin() + c.dst * c_.page_size);
      written.push_back(c.dst);
    }
    expect_exclusive(seq, written);
    model.insert(model.end(), tokens.begin(), tokens.end());
    write(seq, from);
    check_seq(seq);
  }

  void fork() {
    const SeqId parent = pick();
    const SeqId child = m_.fork(parent);
    ASSERT_FALSE(seqs_.contains(child));
    seqs_[child] = seqs_.at(parent);
    ASSERT_TRUE(std::ranges::equal(m_.pages(parent), m_.pages(child)));
    check_seq(child);
  }

  void free_one() {
    const SeqId seq = pick();
    m_.free(seq);
    seqs_.erase(seq);
  }

  RandomCase c_;
  KVCacheManager m_;
  Tokens kv_;  // [num_pages * page_size] the token whose K/V each slot holds
  std::map<SeqId, Tokens> seqs_;
  std::vector<Tokens> system_;
  std::mt19937_64 rng_{20240611};
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  int adds_ = 0, out_of_blocks_ = 0, copies_ = 0, evictions_ = 0;
};

TEST(KVCacheManagerRandom, PrefixCachingPageSize4) { RandomModel({64, 4, true, 100000}).run(); }
TEST(KVCacheManagerRandom, PrefixCachingPageSize1) { RandomModel({48, 1, true, 20000}).run(); }
TEST(KVCacheManagerRandom, NoPrefixCachingPageSize3) { RandomModel({64, 3, false, 20000}).run(); }

}  // namespace
}  // namespace pagedattn
