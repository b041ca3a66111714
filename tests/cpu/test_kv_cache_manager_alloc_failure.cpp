// KVCacheManager commits when host memory runs out: each commit either succeeds or throws
// std::bad_alloc and changes nothing. The allocation that fails is picked by a replacement of
// the global operator new, which is why these cases have an executable of their own.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <new>
#include <tuple>
#include <vector>

#include "pagedattn/kv_cache_manager.h"

namespace {
// Allocations left before the one that fails; negative: none fails.
std::int64_t g_allocations_before_failure = -1;
}  // namespace

void* operator new(std::size_t size) {
  if (g_allocations_before_failure == 0) {
    g_allocations_before_failure = -1;
    throw std::bad_alloc();
  }
  if (g_allocations_before_failure > 0) --g_allocations_before_failure;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace pagedattn {
namespace {

using Tokens = std::vector<TokenId>;

// A pool with every kind of page a commit can touch: used pages, copies of registered pages
// (b's pages 0 and 1 duplicate a's, and a is gone, so they are cached), cached pages to hit and
// to evict, a shared partly filled page (b and its fork f) and a sequence with uncomputed pages
// whose content is partly registered already (e).
struct Scene {
  KVCacheManager m{{.num_pages = 20, .page_size = 2, .enable_prefix_caching = true}};
  SeqId b = 0, e = 0, f = 0;

  Scene() {
    const Tokens prompt{1, 2, 3, 4, 5};
    const SeqId a = m.add_sequence(prompt).id;
    b = m.add_sequence(prompt).id;
    e = m.add_sequence(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}).id;
    m.mark_computed(a, 5);
    m.mark_computed(b, 5);
    m.free(a);
    const SeqId c = m.add_sequence(Tokens{9, 9, 9, 9, 9, 9, 9}).id;
    m.mark_computed(c, 7);
    m.free(c);
    f = m.fork(b);
    m.check_integrity();
  }
};

// What the public interface shows of a manager: metrics and every sequence's pages and counts.
struct State {
  CacheMetrics metrics;
  std::map<SeqId, std::tuple<std::vector<PageId>, std::int64_t, std::int64_t>> seqs;

  State(const KVCacheManager& m, const std::vector<SeqId>& ids) : metrics(m.metrics()) {
    for (SeqId id : ids) {
      if (!m.contains(id)) continue;
      const auto pages = m.pages(id);
      seqs[id] = {{pages.begin(), pages.end()}, m.length(id), m.num_computed(id)};
    }
  }
  bool operator==(const State& o) const {
    auto fields = [](const CacheMetrics& c) {
      return std::tuple(c.pages_total, c.pages_used, c.pages_cached, c.pages_free, c.tokens_stored,
                        c.internal_fragmentation_pct, c.prefix_pages_queried, c.prefix_pages_hit);
    };
    return fields(metrics) == fields(o.metrics) && seqs == o.seqs;
  }
};

// Prompts whose hits and pages show the prefix index, LRU order and free list of a manager.
std::vector<std::int64_t> probe(KVCacheManager& m) {
  std::vector<std::int64_t> out;
  for (const Tokens& prompt : {Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, Tokens{9, 9, 9, 9, 9, 9, 1},
                               Tokens{1, 2, 3, 4, 5, 6, 7, 1}}) {
    if (!m.can_allocate(prompt)) {
      out.push_back(-1);
      continue;
    }
    const auto added = m.add_sequence(prompt);
    out.push_back(added.num_cached_tokens);
    out.insert(out.end(), m.pages(added.id).begin(), m.pages(added.id).end());
  }
  return out;
}

// Runs `commit` on a fresh scene with the n-th allocation failing, for n = 0, 1, ... until it
// succeeds. After each failure the manager must be intact and as before; the same commit then
// succeeds, returns the same and leaves the manager as on a scene that never saw a failure.
void expect_atomic(const std::function<std::int64_t(Scene&)>& commit) {
  int failures = 0;
  for (std::int64_t n = 0;; ++n) {
    Scene scene;
    const std::vector<SeqId> ids{scene.b, scene.e, scene.f, scene.f + 1};
    const State before(scene.m, ids);
    bool failed = false;
    g_allocations_before_failure = n;
    try {
      commit(scene);
    } catch (const std::bad_alloc&) {
      failed = true;
    }
    g_allocations_before_failure = -1;
    if (!failed) break;
    ++failures;
    SCOPED_TRACE("allocation " + std::to_string(n) + " failed");
    ASSERT_NO_THROW(scene.m.check_integrity());
    ASSERT_TRUE(State(scene.m, ids) == before);
    Scene untouched;
    ASSERT_EQ(commit(scene), commit(untouched));
    scene.m.check_integrity();
    ASSERT_TRUE(State(scene.m, ids) == State(untouched.m, ids));
    ASSERT_EQ(probe(scene.m), probe(untouched.m));
  }
  EXPECT_GT(failures, 0);
}

// Hits two cached pages, takes the free pages and evicts two registered pages that have copies.
TEST(KVCacheManagerAllocFailure, AddSequence) {
  Tokens prompt{9, 9, 9, 9};
  for (TokenId t = 0; t < 18; ++t) prompt.push_back(100 + t);
  expect_atomic([&](Scene& s) { return s.m.add_sequence(prompt).num_cached_tokens; });
}

// Copies the shared last page and adds three pages.
TEST(KVCacheManagerAllocFailure, Append) {
  const Tokens tokens{6, 7, 8, 9, 10, 11};
  expect_atomic([&](Scene& s) { return static_cast<std::int64_t>(s.m.append(s.f, tokens).size()); });
}

TEST(KVCacheManagerAllocFailure, Fork) {
  expect_atomic([](Scene& s) { return s.m.fork(s.e); });
}

// Two pages become copies of registered ones, three take new keys.
TEST(KVCacheManagerAllocFailure, MarkComputed) {
  expect_atomic([](Scene& s) {
    s.m.mark_computed(s.e, 10);
    return s.m.num_computed(s.e);
  });
}

}  // namespace
}  // namespace pagedattn
