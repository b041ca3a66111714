// KVCacheManager: a long randomised run against a model of what every sequence must read back
// from its slots.
//
// The model plays the caller: it keeps every live sequence's tokens and the contents of every
// slot of the pool (what append_kv would have written), writes K/V in chunks and marks them
// computed, performs the returned page copies, and checks that each sequence reads its written
// tokens back, that prefix hits point at slots already written with the prompt, and that no
// write lands in a page another sequence holds. Freshly reserved slots are poisoned, and
// sequences are often freed (preempted) with part of their prompt never written, so a hit on a
// reserved but uncomputed page shows up as a poisoned slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "pagedattn/error.h"
#include "pagedattn/kv_cache_manager.h"

namespace pagedattn {
namespace {

using Tokens = std::vector<TokenId>;

constexpr TokenId kUnwritten = -1;  // a slot no append_kv has written since its reservation

void expect_same_metrics(const CacheMetrics& a, const CacheMetrics& b) {
  auto fields = [](const CacheMetrics& m) {
    return std::tuple(m.pages_total, m.pages_used, m.pages_cached, m.pages_free, m.tokens_stored,
                      m.internal_fragmentation_pct, m.prefix_pages_queried, m.prefix_pages_hit);
  };
  EXPECT_EQ(fields(a), fields(b));
}

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
        m_({.num_pages = c.num_pages, .page_size = c.page_size, .enable_prefix_caching = c.caching}),
        kv_(static_cast<std::size_t>(c.num_pages * c.page_size), kUnwritten) {
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
    EXPECT_GT(partial_frees_, 0);
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
  struct ModelSeq {
    Tokens tokens;
    std::int64_t written = 0;  // leading tokens whose K/V are in their slots
    std::int64_t length() const { return static_cast<std::int64_t>(tokens.size()); }
  };

  Tokens random_tokens(std::size_t n) {
    Tokens v(n);
    for (auto& t : v) t = static_cast<TokenId>(rng_() % 50000);
    return v;
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(rng_() % n); }
  std::int64_t between(std::int64_t lo, std::int64_t hi) {  // inclusive
    return lo + static_cast<std::int64_t>(below(static_cast<std::size_t>(hi - lo + 1)));
  }
  SeqId pick() {
    auto it = seqs_.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(below(seqs_.size())));
    return it->first;
  }

  // Writes tokens [written, to) of `seq` into their slots (the pages written must be its own),
  // then reports them computed, as an engine does after each prefill chunk or decode step.
  void write_to(SeqId seq, std::int64_t to) {
    ModelSeq& s = seqs_.at(seq);
    std::vector<PageId> written;
    for (auto i = s.written; i < to; ++i) {
      kv_[static_cast<std::size_t>(m_.slot(seq, i))] = s.tokens[static_cast<std::size_t>(i)];
      written.push_back(m_.pages(seq)[static_cast<std::size_t>(i / c_.page_size)]);
    }
    expect_exclusive(seq, written);
    s.written = std::max(s.written, to);
    m_.mark_computed(seq, to);
    // A stale, smaller count changes nothing.
    m_.mark_computed(seq, between(0, to));
    ASSERT_EQ(m_.num_computed(seq), s.written);
  }

  void expect_exclusive(SeqId seq, const std::vector<PageId>& written) {
    if (written.empty()) return;
    for (const auto& [other, s] : seqs_) {
      if (other == seq) continue;
      for (PageId p : m_.pages(other)) {
        ASSERT_EQ(std::count(written.begin(), written.end(), p), 0)
            << "sequence " << seq << " wrote into page " << p << " held by sequence " << other;
      }
    }
  }

  void check_seq(SeqId seq) {
    const ModelSeq& s = seqs_.at(seq);
    ASSERT_EQ(m_.length(seq), s.length());
    ASSERT_EQ(m_.num_computed(seq), s.written);
    for (std::int64_t i = 0; i < s.written; ++i) {
      ASSERT_EQ(kv_[static_cast<std::size_t>(m_.slot(seq, i))], s.tokens[static_cast<std::size_t>(i)])
          << "sequence " << seq << " token " << i;
    }
  }

  void check_all() {
    std::int64_t total = 0;
    for (const auto& [seq, s] : seqs_) {
      check_seq(seq);
      total += s.length();
    }
    const auto mt = m_.metrics();
    EXPECT_EQ(mt.tokens_stored, total);
    EXPECT_EQ(mt.pages_used + mt.pages_cached + mt.pages_free, mt.pages_total);
    // Both page-table formats list exactly pages(seq), in order.
    std::vector<SeqId> ids;
    for (const auto& [seq, s] : seqs_) ids.push_back(seq);
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
    for (const auto& [seq, s] : seqs_) ids.push_back(seq);
    const auto metrics = m_.metrics();
    const auto table = m_.block_table(ids);
    try {
      commit();
      ADD_FAILURE() << "expected Error(kOutOfBlocks)";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kOutOfBlocks) << e.what();
    }
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
    ASSERT_EQ(m_.num_computed(added.id), added.num_cached_tokens);
    ASSERT_FALSE(seqs_.contains(added.id));
    for (std::int64_t i = 0; i < len; ++i) {
      auto& slot = kv_[static_cast<std::size_t>(m_.slot(added.id, i))];
      if (i < added.num_cached_tokens) {  // a hit must hold the prompt's K/V, written earlier
        ASSERT_EQ(slot, prompt[static_cast<std::size_t>(i)]) << "prefix hit on token " << i;
      } else {
        slot = kUnwritten;  // a fresh reservation holds whatever was there: nothing valid
      }
    }
    seqs_[added.id] = {prompt, added.num_cached_tokens};
    // Most prompts are written at once; the others stop after a first chunk, to be continued
    // by append() or preempted by free_one().
    write_to(added.id, below(4) != 0 ? len : between(added.num_cached_tokens, len));
    check_seq(added.id);
  }

  void append() {
    const SeqId seq = pick();
    ModelSeq& s = seqs_.at(seq);
    if (s.written < s.length()) {  // still prefilling: its next chunk
      write_to(seq, between(s.written + 1, s.length()));
      check_seq(seq);
      return;
    }
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
    const auto from = s.length();
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
    s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
    ASSERT_EQ(m_.num_computed(seq), from);  // reserving computes nothing
    write_to(seq, s.length());
    check_seq(seq);
  }

  // Engines fork once the prompt is computed; a partly computed parent finishes its prefill
  // first, so that no later write lands in a page the two share.
  void fork() {
    const SeqId parent = pick();
    write_to(parent, seqs_.at(parent).length());
    const SeqId child = m_.fork(parent);
    ASSERT_FALSE(seqs_.contains(child));
    seqs_[child] = seqs_.at(parent);
    ASSERT_TRUE(std::ranges::equal(m_.pages(parent), m_.pages(child)));
    ASSERT_EQ(m_.num_computed(child), m_.num_computed(parent));
    check_seq(child);
  }

  // Finishing or preempting: a partly computed sequence drops its unwritten tail, whose slots
  // stay poisoned so that a hit on them would be caught.
  void free_one() {
    const SeqId seq = pick();
    const ModelSeq& s = seqs_.at(seq);
    if (s.written < s.length()) ++partial_frees_;
    m_.free(seq);
    seqs_.erase(seq);
  }

  RandomCase c_;
  KVCacheManager m_;
  Tokens kv_;  // [num_pages * page_size] the token whose K/V each slot holds
  std::map<SeqId, ModelSeq> seqs_;
  std::vector<Tokens> system_;
  std::mt19937_64 rng_{20240611};
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  int adds_ = 0, out_of_blocks_ = 0, copies_ = 0, evictions_ = 0, partial_frees_ = 0;
};

TEST(KVCacheManagerRandom, PrefixCachingPageSize4) { RandomModel({64, 4, true, 100000}).run(); }
TEST(KVCacheManagerRandom, PrefixCachingPageSize1) { RandomModel({48, 1, true, 20000}).run(); }
TEST(KVCacheManagerRandom, NoPrefixCachingPageSize3) { RandomModel({64, 3, false, 20000}).run(); }

}  // namespace
}  // namespace pagedattn
