// KVCacheManager: focused cases for each behaviour (the randomised run is in
// test_kv_cache_manager_random.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "core/prefix_hash.h"
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
  m.mark_computed(a.id, 14);
  const auto b = m.add_sequence(concat(prompt, {7, 7}));
  EXPECT_EQ(b.num_cached_tokens, 12);
  EXPECT_EQ(m.num_computed(b.id), 12);  // hits count as computed
  m.mark_computed(b.id, 16);
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
  m.mark_computed(m.add_sequence(prompt).id, 17);
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
  m.mark_computed(a.id, 8);
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
  m.mark_computed(m.add_sequence(prompt, 1).id, 9);
  const auto b = m.add_sequence(prompt, 2);
  EXPECT_EQ(b.num_cached_tokens, 0);
  m.mark_computed(b.id, 9);
  EXPECT_EQ(m.add_sequence(prompt, 1).num_cached_tokens, 8);
  EXPECT_EQ(m.add_sequence(prompt, 2).num_cached_tokens, 8);
  m.check_integrity();
}

TEST(KVCacheManager, PagesFilledByAppendAreCached) {
  auto m = make(16, 4);
  const auto a = m.add_sequence(iota_tokens(3));
  m.append(a.id, iota_tokens(6, 3));  // fills pages 0 and 1
  EXPECT_EQ(m.num_computed(a.id), 0);
  m.mark_computed(a.id, 9);
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
    m.mark_computed(s.id, 5);
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
  m.mark_computed(a.id, 9);
  const auto pa = pages_of(m, a.id);
  m.free(a.id);  // two cached pages, one free
  const auto pb = pages_of(m, m.add_sequence(iota_tokens(5, 100)).id);
  EXPECT_EQ(std::ranges::count(pb, pa[1]), 1);
  EXPECT_EQ(std::ranges::count(pb, pa[0]), 0);
}

// A sequence that computes a page already registered keeps its own as a copy and chains its
// later pages from the registered one. When that one is evicted, the copy takes its place, so
// those later pages stay reachable.
TEST(KVCacheManager, CopyTakesOverWhenTheRegisteredPageIsEvicted) {
  auto m = make(8, 4);
  const auto prompt = iota_tokens(8);
  const auto more = iota_tokens(4, 100);
  const auto a = m.add_sequence(prompt);  // pages x0, x1
  m.mark_computed(a.id, 8);
  const auto b = m.add_sequence(prompt);  // hits x0; its page 1 is a copy of x1
  m.append(b.id, more);
  m.mark_computed(b.id, 12);  // its page 2 chains from x1
  const auto pb = pages_of(m, b.id);
  m.free(a.id);                                         // x1 cached
  const auto c = m.add_sequence(iota_tokens(17, 500));  // takes 4 free pages and evicts x1
  m.mark_computed(c.id, 17);
  m.free(c.id);
  m.free(b.id);
  m.check_integrity();
  EXPECT_EQ(m.metrics().pages_cached, 4 + 3);  // c's full pages, x0 and both of b's own
  const auto f = m.add_sequence(concat(concat(prompt, more), {1}));
  EXPECT_EQ(f.num_cached_tokens, 12);
  EXPECT_TRUE(std::equal(pb.begin(), pb.end(), m.pages(f.id).begin()));
  m.check_integrity();
}

// The registered page a sequence's copy stands in for is evicted while the sequence runs; its
// later pages stay reachable after it ends.
TEST(KVCacheManager, HeldCopyKeepsLaterPagesReachableAfterItsSequenceEnds) {
  auto m = make(4, 1);
  const auto a = m.add_sequence(Tokens{1, 5});
  m.mark_computed(a.id, 2);
  m.free(a.id);  // a0 (token 1) and a1 cached
  const auto b = m.add_sequence(Tokens{1});
  m.append(b.id, Tokens{2, 3});
  m.mark_computed(b.id, 3);  // b0 is a copy of a0; b1 and b2 chain from a0
  m.check_integrity();
  m.free(m.add_sequence(Tokens{7}).id);  // evicts a0: b0 takes its place
  m.free(m.add_sequence(Tokens{8}).id);
  m.free(b.id);
  EXPECT_EQ(m.metrics().pages_cached, 3);
  EXPECT_EQ(m.add_sequence(Tokens{1, 2, 3, 4}).num_cached_tokens, 3);
  m.check_integrity();
}

// A page computed after an evicted page's copy holds what a reachable entry holds: it becomes a
// copy of that entry, which stays in the index.
TEST(KVCacheManager, ReachableEntryIsNotReplaced) {
  auto m = make(12, 1);
  const auto x = m.add_sequence(Tokens{1, 5});
  m.mark_computed(x.id, 2);
  m.free(x.id);
  const auto d = m.add_sequence(Tokens{1});
  m.append(d.id, Tokens{2, 9});
  m.mark_computed(d.id, 1);  // d0 is a copy of x0
  m.free(m.add_sequence(Tokens(9, 7)).id);  // evicts x1 and x0: d0 takes x0's place
  const auto e = m.add_sequence(Tokens{1, 2, 4});
  m.mark_computed(e.id, 3);  // e hit d0; its own pages e1 and e2 follow it
  const auto f0 = m.add_sequence(Tokens{1, 2, 4, 5});
  EXPECT_EQ(f0.num_cached_tokens, 3);
  m.free(f0.id);
  m.mark_computed(d.id, 2);  // d1 holds what e1 holds, after the same page
  EXPECT_EQ(m.add_sequence(Tokens{1, 2, 4, 5}).num_cached_tokens, 3);
  m.check_integrity();
}

// Salt 0 and page {5} against a salt chosen so that page {6} gets the same key (the hash is
// inverted step by step): the entry stays, and the colliding sequence registers nothing.
TEST(KVCacheManager, HashCollisionKeepsTheEntry) {
  auto unmix = [](std::uint64_t x) {
    auto undo_xorshift = [](std::uint64_t y, int s) {
      std::uint64_t v = y;
      for (int i = 0; i < 64 / s + 1; ++i) v = y ^ (v >> s);
      return v;
    };
    auto inverse = [](std::uint64_t a) {  // of an odd multiplier, by Newton's iteration
      std::uint64_t v = a;
      for (int i = 0; i < 6; ++i) v *= 2 - a * v;
      return v;
    };
    x = undo_xorshift(x, 31) * inverse(0x94d049bb133111ebull);
    return undo_xorshift(undo_xorshift(x, 27) * inverse(0xbf58476d1ce4e5b9ull), 30);
  };
  constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ull, kSaltMix = 0x243f6a8885a308d3ull;
  using detail::mix64;
  const std::uint64_t root = mix64(detail::kPrefixHashRoot + kGolden);
  const std::uint64_t target = mix64(root ^ mix64(kSaltMix)) ^ 5 ^ 6;
  const std::uint64_t salt = unmix(unmix(target) ^ root) ^ kSaltMix;
  ASSERT_EQ(detail::hash_page(detail::kPrefixHashRoot, 0, Tokens{5}),
            detail::hash_page(detail::kPrefixHashRoot, salt, Tokens{6}));

  auto m = make(16, 1);
  const auto a = m.add_sequence(Tokens{5, 7}, 0);
  m.mark_computed(a.id, 2);
  const auto b = m.add_sequence(Tokens{6, 7, 8, 9}, salt);
  m.mark_computed(b.id, 3);
  m.check_integrity();
  m.mark_computed(b.id, 4);
  EXPECT_EQ(m.add_sequence(Tokens{5, 7, 1}, 0).num_cached_tokens, 2);
  EXPECT_EQ(m.add_sequence(Tokens{6, 7, 1}, salt).num_cached_tokens, 0);
  EXPECT_EQ(m.add_sequence(Tokens{5, 7, 1}, salt).num_cached_tokens, 0);
  EXPECT_EQ(m.add_sequence(Tokens{6, 7, 1}, 0).num_cached_tokens, 0);
  m.free(b.id);
  EXPECT_EQ(m.metrics().pages_cached, 0);  // b's pages were never registered
  m.check_integrity();
}

TEST(KVCacheManager, OutOfBlocksThrowsAndChangesNothing) {
  auto m = make(6, 4);
  const auto a = m.add_sequence(iota_tokens(10));  // 3 pages
  m.mark_computed(a.id, 10);
  const SeqId b = m.fork(a.id);
  const auto c = m.add_sequence(iota_tokens(9, 50));  // 3 pages: pool full
  m.mark_computed(c.id, 9);
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
  expect_error(ErrorCode::kInvalidArgument, [&] { m.mark_computed(bad, 0); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.num_computed(bad); });
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

// ---- registration waits for mark_computed ----

// A prompt reserved in full but preempted after its first chunk: only the computed page was
// registered; the others are released unregistered and never hit.
TEST(KVCacheManager, PreemptedPartlyComputedPromptIsNotHit) {
  auto m = make(8, 4);
  const auto prompt = iota_tokens(13);  // 3 full pages + 1 token
  const auto a = m.add_sequence(prompt);
  m.mark_computed(a.id, 6);  // first chunk: page 0 and half of page 1
  m.free(a.id);
  EXPECT_EQ(m.metrics().pages_cached, 1);
  EXPECT_EQ(m.metrics().pages_free, 7);
  const auto b = m.add_sequence(prompt);
  EXPECT_EQ(b.num_cached_tokens, 4);
  EXPECT_EQ(m.num_computed(b.id), 4);
  m.check_integrity();
}

// In one step, a second prompt must not hit pages whose K/V a later chunk of the first writes.
TEST(KVCacheManager, ReservedButUncomputedPagesAreNotHit) {
  auto m = make(16, 4);
  const auto prompt = iota_tokens(13);
  const auto a = m.add_sequence(prompt);
  EXPECT_EQ(m.num_computed(a.id), 0);
  EXPECT_EQ(m.add_sequence(prompt).num_cached_tokens, 0);
  m.mark_computed(a.id, 4);
  const auto c = m.add_sequence(prompt);
  EXPECT_EQ(c.num_cached_tokens, 4);
  EXPECT_EQ(m.pages(c.id)[0], m.pages(a.id)[0]);
  EXPECT_NE(m.pages(c.id)[1], m.pages(a.id)[1]);
  m.check_integrity();
  m.mark_computed(a.id, 13);
  EXPECT_EQ(m.add_sequence(prompt).num_cached_tokens, 12);
  m.check_integrity();
}

TEST(KVCacheManager, MarkComputedIsBoundedAndMonotone) {
  auto m = make(8, 4);
  const auto a = m.add_sequence(iota_tokens(6));
  expect_error(ErrorCode::kInvalidArgument, [&] { m.mark_computed(a.id, -1); });
  expect_error(ErrorCode::kInvalidArgument, [&] { m.mark_computed(a.id, 7); });
  EXPECT_EQ(m.num_computed(a.id), 0);
  m.mark_computed(a.id, 0);
  m.mark_computed(a.id, 5);
  EXPECT_EQ(m.num_computed(a.id), 5);
  m.mark_computed(a.id, 3);  // a stale count: no-op
  EXPECT_EQ(m.num_computed(a.id), 5);
  m.append(a.id, iota_tokens(3, 6));
  EXPECT_EQ(m.num_computed(a.id), 5);
  m.mark_computed(a.id, 9);
  EXPECT_EQ(m.num_computed(a.id), 9);
  EXPECT_EQ(m.add_sequence(iota_tokens(9)).num_cached_tokens, 8);
  m.check_integrity();
  // Without prefix caching only the count moves.
  auto off = make(8, 4, /*caching=*/false);
  const auto b = off.add_sequence(iota_tokens(9));
  off.mark_computed(b.id, 9);
  EXPECT_EQ(off.num_computed(b.id), 9);
  EXPECT_EQ(off.add_sequence(iota_tokens(9)).num_cached_tokens, 0);
  off.free(b.id);
  EXPECT_EQ(off.metrics().pages_cached, 0);
  off.check_integrity();
}

TEST(KVCacheManager, ForkCopiesTheComputedCount) {
  auto m = make(16, 4);
  const auto prompt = iota_tokens(10);
  const auto a = m.add_sequence(prompt);
  m.mark_computed(a.id, 4);
  const SeqId b = m.fork(a.id);
  EXPECT_EQ(m.num_computed(b), 4);
  m.mark_computed(b, 8);  // registers the page both share
  EXPECT_EQ(m.num_computed(a.id), 4);
  m.check_integrity();
  EXPECT_EQ(m.add_sequence(prompt).num_cached_tokens, 8);
  m.mark_computed(a.id, 10);  // finds page 1 already registered: chains to it
  EXPECT_EQ(m.num_computed(a.id), 10);
  m.check_integrity();
  m.free(b);
  m.free(a.id);
  EXPECT_EQ(m.add_sequence(concat(prompt, {1, 2, 3})).num_cached_tokens, 8);
  m.check_integrity();
}

}  // namespace
}  // namespace pagedattn
