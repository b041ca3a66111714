// The KV cache manager: page pool, per-sequence page lists, copy-on-write, prefix caching.
//
// Every page is in exactly one state:
//   free    unreferenced, no cached content: on free_pages (a stack: O(1) take / give back);
//   cached  unreferenced, but registered in the prefix index: on the LRU list, evictable;
//   used    referenced by >= 1 sequence (ref = number of sequences whose page list holds it).
// Allocation takes a free page, else evicts the least recently used cached page.
//
// Prefix caching keys every full page by a chained hash (prefix_hash.h). A page's K/V depend on
// every token before it, so a hit must prove the whole prefix equal, not just the page: the
// index entry also records the page's tokens, salt and its parent page (by serial, a number
// unique to each allocation, so a parent that was evicted and reused no longer matches).
// Matching page i requires its recorded parent to be the page matched for i - 1; by induction
// the whole prefix is equal.
//
// A page is registered only once the caller has marked its tokens computed (mark_computed),
// never at reservation: until then its slots hold whatever was there before, and a prefix hit on
// it would read garbage. Each sequence registers its full pages in order, so it tracks how many
// leading pages are done and keeps the tokens of the rest.
//
// A sequence may compute a page that is already registered (two prompts computed side by side).
// Its page then stays out of the index as a copy of the registered one, and its later pages chain
// from that one. Should the registered page be evicted while a copy is held, the copy takes its
// place in the index and its serial, so the content stays reachable, and so do the pages chained
// after it. Every index entry is therefore reachable from the root (check_integrity verifies it),
// and an entry is never replaced: a key taken by other content (a 64-bit hash collision) keeps
// its entry, and the sequence that collided registers none of its later pages.
//
// Commits are strongly exception-safe, also when an allocation fails: whatever allocates (map
// nodes, vector capacity) comes first, and only then do pages and counters change.
#include "pagedattn/kv_cache_manager.h"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/prefix_hash.h"
#include "pagedattn/error.h"

namespace pagedattn {

namespace {

constexpr PageId kNoPage = -1;
constexpr std::uint64_t kNoParent = 0;  // serials start at 1
// The chain serial of a sequence whose page collided with other content under the same key: no
// prompt can reach its later pages, so they are not registered.
constexpr std::uint64_t kLostChain = std::numeric_limits<std::uint64_t>::max();

enum class PageState : std::uint8_t { kFree, kCached, kUsed };

struct Page {
  std::int32_t ref = 0;
  PageState state = PageState::kFree;
  bool registered = false;   // the prefix index maps `hash` to this page
  std::uint64_t serial = 0;  // changes on every allocation of this page
  // Valid while registered: the key, what it was computed from, and the parent's serial.
  std::uint64_t hash = 0;
  std::uint64_t parent_hash = 0;
  std::uint64_t salt = 0;
  std::uint64_t parent_serial = kNoParent;
  PageId lru_prev = kNoPage;  // LRU links, valid while cached
  PageId lru_next = kNoPage;
  // Copies of a registered page: used, unregistered pages with the same content after the same
  // prefix, in a list from `first_copy` through copy_prev / copy_next; each names its `original`.
  PageId first_copy = kNoPage;  // on a registered page
  PageId original = kNoPage;    // on a copy
  PageId copy_prev = kNoPage;
  PageId copy_next = kNoPage;
};

struct Sequence {
  std::vector<PageId> pages;  // ceil(length / page_size) pages
  std::int64_t length = 0;
  std::uint64_t salt = 0;
  std::int64_t computed = 0;  // leading tokens whose K/V are written, <= length
  // Leading pages registered in the prefix index (or copies of identical registered pages, or
  // left out after a collision); with prefix caching exactly computed / page_size, without it 0.
  std::int64_t registered = 0;
  // Chain state after the last registered page: its hash and the serial of the page that stands
  // for it in the prefix index (the sequence's own page, or the one it is a copy of), or
  // kLostChain.
  std::uint64_t chain_hash = detail::kPrefixHashRoot;
  std::uint64_t chain_serial = kNoParent;
  // Tokens from page `registered` on, which the pages still to be registered are keyed by
  // (prefix caching only).
  std::vector<TokenId> pending;
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Capacity for `size` elements, grown geometrically as push_back grows it: a commit allocates up
// front (and can fail before it changes anything) without making a run of appends quadratic.
template <typename T>
void reserve_for(std::vector<T>& v, std::size_t size) {
  if (size > v.capacity()) v.reserve(std::max(size, 2 * v.capacity()));
}

// Lookups are hot (slot() runs per token), so the message is only built when one fails.
Error unknown_sequence(SeqId id, std::source_location where = std::source_location::current()) {
  return Error(ErrorCode::kInvalidArgument, "unknown sequence id " + std::to_string(id), where);
}

[[noreturn]] void integrity_failure(const std::string& what) { throw Error(ErrorCode::kInternal, what); }

}  // namespace

struct KVCacheManager::Impl {
  std::int64_t page_size;
  bool caching;
  std::vector<Page> pages;
  std::vector<TokenId> page_tokens;  // [num_pages, page_size], valid for registered pages
  std::vector<PageId> free_pages;    // stack; the back is taken first
  PageId lru_head = kNoPage;         // least recently used cached page (evicted first)
  PageId lru_tail = kNoPage;
  std::int64_t lru_size = 0;
  std::int64_t used_count = 0;
  std::unordered_map<std::uint64_t, PageId> index;
  std::unordered_map<SeqId, Sequence> seqs;
  SeqId next_id = 0;
  std::uint64_t next_serial = 1;
  std::int64_t tokens_stored = 0;
  // Every full prompt page that could hit counts as queried, also those after the first miss,
  // so the hit rate is the share of cacheable prompt pages that were served from the cache.
  std::int64_t prefix_queried = 0;
  std::int64_t prefix_hit = 0;

  explicit Impl(const KVCacheManagerConfig& c) : page_size(c.page_size), caching(c.enable_prefix_caching) {
    check_arg(c.num_pages > 0 && c.num_pages <= std::numeric_limits<PageId>::max(),
              "num_pages must be in [1, 2^31), got " + std::to_string(c.num_pages));
    check_arg(c.page_size >= 1 && c.page_size <= std::numeric_limits<std::int64_t>::max() / c.num_pages,
              "page_size must be >= 1 with num_pages * page_size < 2^63, got page_size " +
                  std::to_string(c.page_size) + " and num_pages " + std::to_string(c.num_pages));
    pages.resize(static_cast<std::size_t>(c.num_pages));
    if (caching) page_tokens.resize(static_cast<std::size_t>(c.num_pages * c.page_size));
    free_pages.reserve(pages.size());
    for (PageId p = static_cast<PageId>(c.num_pages) - 1; p >= 0; --p) free_pages.push_back(p);
  }

  std::int64_t num_pages() const { return static_cast<std::int64_t>(pages.size()); }
  Page& page(PageId p) { return pages[static_cast<std::size_t>(p)]; }
  const Page& page(PageId p) const { return pages[static_cast<std::size_t>(p)]; }
  std::span<const TokenId> tokens_of(PageId p) const {
    return {page_tokens.data() + static_cast<std::size_t>(p) * page_size,
            static_cast<std::size_t>(page_size)};
  }
  void store_tokens(PageId p, std::span<const TokenId> tokens) {
    std::copy(tokens.begin(), tokens.end(), page_tokens.begin() + static_cast<std::ptrdiff_t>(p) * page_size);
  }
  std::int64_t available() const { return static_cast<std::int64_t>(free_pages.size()) + lru_size; }

  const Sequence& seq(SeqId id) const {
    auto it = seqs.find(id);
    if (it == seqs.end()) throw unknown_sequence(id);
    return it->second;
  }
  Sequence& seq(SeqId id) { return const_cast<Sequence&>(std::as_const(*this).seq(id)); }

  // ---- LRU list of cached pages (intrusive, through Page::lru_prev / lru_next) ----
  void lru_push_back(PageId p) {
    Page& pg = page(p);
    pg.state = PageState::kCached;
    pg.lru_prev = lru_tail;
    pg.lru_next = kNoPage;
    (lru_tail == kNoPage ? lru_head : page(lru_tail).lru_next) = p;
    lru_tail = p;
    ++lru_size;
  }
  void lru_remove(PageId p) {
    Page& pg = page(p);
    (pg.lru_prev == kNoPage ? lru_head : page(pg.lru_prev).lru_next) = pg.lru_next;
    (pg.lru_next == kNoPage ? lru_tail : page(pg.lru_next).lru_prev) = pg.lru_prev;
    pg.lru_prev = pg.lru_next = kNoPage;
    --lru_size;
  }

  // `p` becomes the index's page for `hash`: registered, with its key's parts and its tokens (its
  // serial and the index entry are the caller's).
  void set_entry(PageId p, std::uint64_t hash, std::uint64_t parent_hash, std::uint64_t salt,
                 std::uint64_t parent_serial, std::span<const TokenId> tokens) {
    Page& pg = page(p);
    pg.registered = true;
    pg.hash = hash;
    pg.parent_hash = parent_hash;
    pg.salt = salt;
    pg.parent_serial = parent_serial;
    store_tokens(p, tokens);
  }

  // ---- copies of registered pages (intrusive list from Page::first_copy) ----
  void link_copy(PageId original, PageId p) {
    Page& o = page(original);
    Page& pg = page(p);
    pg.original = original;
    pg.copy_prev = kNoPage;
    pg.copy_next = o.first_copy;
    if (o.first_copy != kNoPage) page(o.first_copy).copy_prev = p;
    o.first_copy = p;
  }
  void unlink_copy(PageId p) {
    Page& pg = page(p);
    (pg.copy_prev == kNoPage ? page(pg.original).first_copy : page(pg.copy_prev).copy_next) = pg.copy_next;
    if (pg.copy_next != kNoPage) page(pg.copy_next).copy_prev = pg.copy_prev;
    pg.original = pg.copy_prev = pg.copy_next = kNoPage;
  }

  // Cached page `p` is being evicted. A held copy, if any, takes its place in the index, its
  // serial (so the pages registered after `p` chain from the copy) and its other copies.
  void evict(PageId p) {
    Page& pg = page(p);
    pg.registered = false;
    const auto it = index.find(pg.hash);
    if (pg.first_copy == kNoPage) {
      index.erase(it);
      return;
    }
    const PageId heir = pg.first_copy;
    unlink_copy(heir);
    set_entry(heir, pg.hash, pg.parent_hash, pg.salt, pg.parent_serial, tokens_of(p));
    Page& h = page(heir);
    h.serial = pg.serial;
    h.first_copy = std::exchange(pg.first_copy, kNoPage);
    for (PageId c = h.first_copy; c != kNoPage; c = page(c).copy_next) page(c).original = heir;
    it->second = heir;
  }

  // A fresh page with ref 1. The caller has checked available() > 0.
  PageId allocate() {
    PageId p;
    if (!free_pages.empty()) {
      p = free_pages.back();
      free_pages.pop_back();
    } else {
      p = lru_head;
      lru_remove(p);
      evict(p);
    }
    Page& pg = page(p);
    pg.ref = 1;
    pg.state = PageState::kUsed;
    pg.serial = next_serial++;
    ++used_count;
    return p;
  }

  void acquire(PageId p) {
    Page& pg = page(p);
    if (pg.ref == 0) {  // a prefix hit on a cached page takes it back out of the LRU list
      lru_remove(p);
      pg.state = PageState::kUsed;
      ++used_count;
    }
    ++pg.ref;
  }

  void release(PageId p) {
    Page& pg = page(p);
    if (--pg.ref > 0) return;
    --used_count;
    if (pg.registered) {
      lru_push_back(p);
      return;
    }
    if (pg.original != kNoPage) drop_copy(p);
    pg.state = PageState::kFree;
    free_pages.push_back(p);
  }

  // Copy `p` leaves use; its content was in use until now, so a cached original counts as just
  // used. That also keeps it behind the pages chained after the copy, which its sequence
  // released just before (last page first), so that they are evicted before it.
  void drop_copy(PageId p) {
    const PageId original = page(p).original;
    unlink_copy(p);
    if (page(original).state == PageState::kCached) {
      lru_remove(original);
      lru_push_back(original);
    }
  }

  // Does registered page `p` hold exactly this content after this parent?
  bool same_entry(PageId p, std::uint64_t salt, std::uint64_t parent_serial,
                  std::span<const TokenId> tokens) const {
    const Page& pg = page(p);
    return pg.salt == salt && pg.parent_serial == parent_serial &&
           std::equal(tokens.begin(), tokens.end(), tokens_of(p).begin());
  }

  // `p` (held by `s`) is full of computed `tokens`: key it in the prefix index, or make it a copy
  // of the identical page registered already, and advance the sequence's chain. The index has a
  // node for the key (reserve_keys), so nothing here allocates.
  void register_full(Sequence& s, PageId p, std::span<const TokenId> tokens) {
    const std::uint64_t parent_hash = s.chain_hash;
    s.chain_hash = detail::hash_page(parent_hash, s.salt, tokens);
    const auto it = index.find(s.chain_hash);
    if (s.chain_serial == kLostChain) {
      // Lost earlier in this call, reserve_keys made a node for this page, which stays empty.
      if (it != index.end() && it->second == kNoPage) index.erase(it);
      return;
    }
    const PageId held = it->second;
    if (held == kNoPage) {
      it->second = p;
      set_entry(p, s.chain_hash, parent_hash, s.salt, s.chain_serial, tokens);
    } else if (held == p || page(p).original == held) {
      // A fork of `s` registered this page, or found the same one registered: nothing to add.
    } else if (same_entry(held, s.salt, s.chain_serial, tokens)) {
      link_copy(held, p);
    } else {
      // Same key, other content: a hash collision. The entry stays (it is reachable, as every
      // entry is); no prompt can reach the later pages of `s`, so they are not registered.
      s.chain_serial = kLostChain;
      return;
    }
    s.chain_serial = page(it->second).serial;
  }

  // The cached pages that hold `prompt`'s leading full pages. Only pages that end before the
  // last prompt token are looked up: the caller recomputes at least that token, and it must
  // write into a page it owns alone, never into a page other sequences read.
  struct PrefixMatch {
    std::vector<PageId> pages;
    std::int64_t eligible = 0;     // full pages looked up
    std::int64_t cached_hits = 0;  // hits on unreferenced (LRU) pages
    std::uint64_t chain_hash = detail::kPrefixHashRoot;
    std::uint64_t chain_serial = kNoParent;
  };
  PrefixMatch match_prefix(std::span<const TokenId> prompt, std::uint64_t salt) const {
    PrefixMatch m;
    if (!caching || prompt.empty()) return m;
    m.eligible = (static_cast<std::int64_t>(prompt.size()) - 1) / page_size;
    for (std::int64_t i = 0; i < m.eligible; ++i) {
      const auto tokens =
          prompt.subspan(static_cast<std::size_t>(i * page_size), static_cast<std::size_t>(page_size));
      const std::uint64_t h = detail::hash_page(m.chain_hash, salt, tokens);
      const auto it = index.find(h);
      if (it == index.end() || !same_entry(it->second, salt, m.chain_serial, tokens)) break;
      m.pages.push_back(it->second);
      if (page(it->second).ref == 0) ++m.cached_hits;
      m.chain_hash = h;
      m.chain_serial = page(it->second).serial;
    }
    return m;
  }

  // Pages add_sequence needs beyond the prefix hits, and whether the pool has them. Hits on
  // cached pages leave the LRU list, so they do not count as evictable.
  bool fits(std::int64_t prompt_len, const PrefixMatch& m) const {
    const std::int64_t fresh = ceil_div(prompt_len, page_size) - static_cast<std::int64_t>(m.pages.size());
    return fresh <= available() - m.cached_hits;
  }

  struct AppendPlan {
    bool copy_last = false;  // the last page is partly filled and shared
    std::int64_t new_pages = 0;
  };
  AppendPlan plan_append(const Sequence& s, std::int64_t n) const {
    AppendPlan plan;
    if (n == 0) return plan;
    const std::int64_t used_in_last = s.length % page_size;
    if (used_in_last != 0) {
      plan.copy_last = page(s.pages.back()).ref > 1;
      n -= std::min(n, page_size - used_in_last);
    }
    plan.new_pages = ceil_div(n, page_size) + (plan.copy_last ? 1 : 0);
    return plan;
  }

  // Before `s` registers its pages up to `target`: gives every key they take a node in the index
  // (empty, kNoPage, where the key is new), so that registering them allocates nothing. If that
  // fails, the nodes made so far go again, and the index is as it was.
  void reserve_keys(const Sequence& s, std::int64_t target) {
    if (!caching || target <= s.registered || s.chain_serial == kLostChain) return;
    const auto ps = static_cast<std::size_t>(page_size);
    const std::span<const TokenId> pending(s.pending);
    std::uint64_t h = s.chain_hash;
    try {
      for (std::size_t i = 0; i < static_cast<std::size_t>(target - s.registered); ++i) {
        h = detail::hash_page(h, s.salt, pending.subspan(i * ps, ps));
        index.try_emplace(h, kNoPage);
      }
    } catch (...) {
      std::erase_if(index, [](const auto& entry) { return entry.second == kNoPage; });
      throw;
    }
  }

  // Registers the full pages of `s` that the computed prefix now covers, in order: each page's
  // key chains from the one before. reserve_keys has made their index nodes.
  void register_computed(Sequence& s) {
    const std::int64_t target = s.computed / page_size;
    if (!caching || target <= s.registered) return;
    const auto count = static_cast<std::size_t>(target - s.registered);
    const auto ps = static_cast<std::size_t>(page_size);
    const std::span<const TokenId> pending(s.pending);
    for (std::size_t i = 0; i < count; ++i) {
      register_full(s, s.pages[static_cast<std::size_t>(s.registered) + i], pending.subspan(i * ps, ps));
    }
    s.pending.erase(s.pending.begin(), s.pending.begin() + static_cast<std::ptrdiff_t>(count * ps));
    s.registered = target;
  }
};

KVCacheManager::KVCacheManager(const KVCacheManagerConfig& config) : impl_(std::make_unique<Impl>(config)) {}
KVCacheManager::~KVCacheManager() = default;
KVCacheManager::KVCacheManager(KVCacheManager&&) noexcept = default;
KVCacheManager& KVCacheManager::operator=(KVCacheManager&&) noexcept = default;

std::int64_t KVCacheManager::page_size() const { return impl_->page_size; }
std::int64_t KVCacheManager::num_pages() const { return impl_->num_pages(); }

bool KVCacheManager::can_allocate(std::span<const TokenId> prompt, std::uint64_t salt) const {
  return impl_->fits(static_cast<std::int64_t>(prompt.size()), impl_->match_prefix(prompt, salt));
}

bool KVCacheManager::can_append(SeqId seq, std::int64_t num_tokens) const {
  if (num_tokens < 0) {
    throw Error(ErrorCode::kInvalidArgument, "num_tokens must be >= 0, got " + std::to_string(num_tokens));
  }
  return impl_->plan_append(impl_->seq(seq), num_tokens).new_pages <= impl_->available();
}

bool KVCacheManager::contains(SeqId seq) const { return impl_->seqs.contains(seq); }

AddedSequence KVCacheManager::add_sequence(std::span<const TokenId> prompt, std::uint64_t salt) {
  Impl& m = *impl_;
  const auto len = static_cast<std::int64_t>(prompt.size());
  Impl::PrefixMatch match = m.match_prefix(prompt, salt);
  if (!m.fits(len, match)) {
    throw Error(
        ErrorCode::kOutOfBlocks,
        "a prompt of " + std::to_string(len) + " tokens needs " +
            std::to_string(ceil_div(len, m.page_size) - static_cast<std::int64_t>(match.pages.size())) +
            " new pages, only " + std::to_string(m.available() - match.cached_hits) + " available");
  }
  // The sequence is built and put in the map before any page changes hands: only that allocates.
  const auto hits = static_cast<std::int64_t>(match.pages.size());
  const std::int64_t total = ceil_div(len, m.page_size);
  Sequence built;
  built.length = len;
  built.salt = salt;
  built.chain_hash = match.chain_hash;
  built.chain_serial = match.chain_serial;
  built.pages = std::move(match.pages);
  built.pages.reserve(static_cast<std::size_t>(total));
  // Only the hit pages hold K/V yet; the rest are registered as the caller marks them computed.
  built.registered = hits;
  built.computed = hits * m.page_size;
  if (m.caching) {
    built.pending.assign(prompt.begin() + static_cast<std::ptrdiff_t>(built.computed), prompt.end());
  }
  const SeqId id = m.next_id;
  Sequence& s = m.seqs.try_emplace(id, std::move(built)).first->second;
  // Hits first, so that the allocations below cannot evict them.
  for (PageId p : s.pages) m.acquire(p);
  while (static_cast<std::int64_t>(s.pages.size()) < total) s.pages.push_back(m.allocate());
  m.prefix_queried += match.eligible;
  m.prefix_hit += hits;
  m.tokens_stored += len;
  ++m.next_id;
  return {id, hits * m.page_size};
}

std::vector<PageCopy> KVCacheManager::append(SeqId seq, std::span<const TokenId> tokens) {
  Impl& m = *impl_;
  Sequence& s = m.seq(seq);
  const Impl::AppendPlan plan = m.plan_append(s, static_cast<std::int64_t>(tokens.size()));
  if (plan.new_pages > m.available()) {
    throw Error(ErrorCode::kOutOfBlocks, "appending " + std::to_string(tokens.size()) +
                                             " tokens to sequence " + std::to_string(seq) + " needs " +
                                             std::to_string(plan.new_pages) + " new pages, only " +
                                             std::to_string(m.available()) + " available");
  }
  // Room for everything first, so that a failed allocation changes nothing.
  const std::int64_t new_length = s.length + static_cast<std::int64_t>(tokens.size());
  const std::int64_t total = ceil_div(new_length, m.page_size);
  std::vector<PageCopy> copies;
  if (plan.copy_last) copies.reserve(1);
  reserve_for(s.pages, static_cast<std::size_t>(total));
  if (m.caching) reserve_for(s.pending, s.pending.size() + tokens.size());
  if (plan.copy_last) {
    const PageId shared = s.pages.back();
    const PageId own = m.allocate();
    s.pages.back() = own;
    m.release(shared);  // ref > 1 before, so the page stays used
    copies.push_back({shared, own});
  }
  while (static_cast<std::int64_t>(s.pages.size()) < total) s.pages.push_back(m.allocate());
  s.length = new_length;
  if (m.caching) s.pending.insert(s.pending.end(), tokens.begin(), tokens.end());
  m.tokens_stored += static_cast<std::int64_t>(tokens.size());
  return copies;
}

SeqId KVCacheManager::fork(SeqId parent) {
  Impl& m = *impl_;
  // The child is copied and put in the map before it takes its references: only that allocates.
  const SeqId id = m.next_id;
  const Sequence& child = m.seqs.try_emplace(id, m.seq(parent)).first->second;
  for (PageId p : child.pages) m.acquire(p);
  m.tokens_stored += child.length;
  ++m.next_id;
  return id;
}

void KVCacheManager::mark_computed(SeqId seq, std::int64_t num_tokens) {
  Impl& m = *impl_;
  Sequence& s = m.seq(seq);
  if (num_tokens < 0 || num_tokens > s.length) {
    throw Error(ErrorCode::kInvalidArgument, "num_tokens " + std::to_string(num_tokens) +
                                                 " out of range [0, " + std::to_string(s.length) +
                                                 "] of sequence " + std::to_string(seq));
  }
  // Callers report progress per step, possibly from stale counts: going back is not an error,
  // and written K/V cannot become unwritten.
  if (num_tokens <= s.computed) return;
  m.reserve_keys(s, num_tokens / m.page_size);  // the only step that allocates
  s.computed = num_tokens;
  m.register_computed(s);
}

void KVCacheManager::free(SeqId seq) {
  Impl& m = *impl_;
  auto it = m.seqs.find(seq);
  if (it == m.seqs.end()) throw unknown_sequence(seq);
  // Last page first: it enters the LRU list earliest and is evicted before the pages it
  // extends, which are the more widely shared prefixes.
  const auto& ps = it->second.pages;
  for (auto p = ps.rbegin(); p != ps.rend(); ++p) m.release(*p);
  m.tokens_stored -= it->second.length;
  m.seqs.erase(it);
}

std::int64_t KVCacheManager::length(SeqId seq) const { return impl_->seq(seq).length; }

std::int64_t KVCacheManager::num_computed(SeqId seq) const { return impl_->seq(seq).computed; }

std::span<const PageId> KVCacheManager::pages(SeqId seq) const { return impl_->seq(seq).pages; }

std::int64_t KVCacheManager::slot(SeqId seq, std::int64_t index) const {
  const Sequence& s = impl_->seq(seq);
  if (index < 0 || index >= s.length) {  // the message is built only on failure: slot() is hot
    throw Error(ErrorCode::kInvalidArgument, "token index " + std::to_string(index) + " out of range [0, " +
                                                 std::to_string(s.length) + ") of sequence " +
                                                 std::to_string(seq));
  }
  const std::int64_t ps = impl_->page_size;
  return static_cast<std::int64_t>(s.pages[static_cast<std::size_t>(index / ps)]) * ps + index % ps;
}

BlockTableData KVCacheManager::block_table(std::span<const SeqId> seqs) const {
  BlockTableData out;
  out.num_seqs = static_cast<std::int64_t>(seqs.size());
  for (SeqId id : seqs)
    out.max_pages = std::max(out.max_pages, static_cast<std::int64_t>(impl_->seq(id).pages.size()));
  out.block_table.assign(static_cast<std::size_t>(out.num_seqs * out.max_pages), -1);
  out.seq_lens.reserve(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = impl_->seq(seqs[i]);
    std::copy(s.pages.begin(), s.pages.end(),
              out.block_table.begin() + static_cast<std::ptrdiff_t>(i) * out.max_pages);
    out.seq_lens.push_back(static_cast<std::int32_t>(s.length));
  }
  return out;
}

CsrPageTableData KVCacheManager::csr(std::span<const SeqId> seqs) const {
  CsrPageTableData out;
  out.indptr.reserve(seqs.size() + 1);
  out.indptr.push_back(0);
  out.last_page_len.reserve(seqs.size());
  for (SeqId id : seqs) {
    const Sequence& s = impl_->seq(id);
    out.indices.insert(out.indices.end(), s.pages.begin(), s.pages.end());
    out.indptr.push_back(static_cast<std::int32_t>(out.indices.size()));
    const std::int64_t in_last =
        s.length - (static_cast<std::int64_t>(s.pages.size()) - 1) * impl_->page_size;
    out.last_page_len.push_back(s.pages.empty() ? 0 : static_cast<std::int32_t>(in_last));
  }
  return out;
}

CacheMetrics KVCacheManager::metrics() const {
  const Impl& m = *impl_;
  CacheMetrics out;
  out.pages_total = m.num_pages();
  out.pages_used = m.used_count;
  out.pages_cached = m.lru_size;
  out.pages_free = static_cast<std::int64_t>(m.free_pages.size());
  out.tokens_stored = m.tokens_stored;
  out.prefix_pages_queried = m.prefix_queried;
  out.prefix_pages_hit = m.prefix_hit;
  // A shared page holds as many valid slots as its fullest holder uses.
  std::vector<std::int32_t> filled(m.pages.size(), 0);
  for (const auto& [id, s] : m.seqs) {
    for (std::size_t i = 0; i < s.pages.size(); ++i) {
      const auto used = static_cast<std::int32_t>(
          std::min(m.page_size, s.length - static_cast<std::int64_t>(i) * m.page_size));
      auto& f = filled[static_cast<std::size_t>(s.pages[i])];
      f = std::max(f, used);
    }
  }
  std::int64_t used_slots = 0;
  for (std::int32_t f : filled) used_slots += f;
  const std::int64_t slots = m.used_count * m.page_size;
  out.internal_fragmentation_pct =
      slots ? 100.0 * static_cast<double>(slots - used_slots) / static_cast<double>(slots) : 0.0;
  return out;
}

void KVCacheManager::check_integrity() const {
  const Impl& m = *impl_;
  const std::int64_t n = m.num_pages();
  auto page_name = [](PageId p) { return "page " + std::to_string(p); };
  // Does the index map `hash` to the page with this serial?
  auto indexed = [&](std::uint64_t hash, std::uint64_t serial) {
    const auto it = m.index.find(hash);
    return it != m.index.end() && it->second >= 0 && it->second < n && m.page(it->second).serial == serial;
  };

  // Reference counts and page lists, recomputed from every sequence. Each holder of a page uses
  // as many of its slots as the others: one that appended into a shared, partly filled page
  // would write slots the others read (copy-on-write prevents it).
  std::vector<std::int64_t> refs(static_cast<std::size_t>(n), 0);
  std::vector<std::int64_t> filled(static_cast<std::size_t>(n), -1);
  std::vector<std::int64_t> last_holder(static_cast<std::size_t>(n), -1);  // ordinal of a sequence
  std::int64_t ordinal = 0;
  std::int64_t tokens = 0;
  for (const auto& [id, s] : m.seqs) {
    auto name = [id = id] { return "sequence " + std::to_string(id); };
    if (s.length < 0 || static_cast<std::int64_t>(s.pages.size()) != ceil_div(s.length, m.page_size)) {
      integrity_failure("page count: " + name() + " of length " + std::to_string(s.length) + " holds " +
                        std::to_string(s.pages.size()) + " pages");
    }
    if (s.computed < 0 || s.computed > s.length) {
      integrity_failure("computed prefix: " + name() + " of length " + std::to_string(s.length) +
                        " has " + std::to_string(s.computed) + " tokens computed");
    }
    // Registering a page beyond the computed prefix would let prefix hits read unwritten slots.
    if (s.registered != (m.caching ? s.computed / m.page_size : 0)) {
      integrity_failure("registered pages: " + name() + " has " + std::to_string(s.registered) +
                        " pages registered with " + std::to_string(s.computed) + " tokens computed");
    }
    if (static_cast<std::int64_t>(s.pending.size()) != (m.caching ? s.length - s.registered * m.page_size : 0)) {
      integrity_failure("pending tokens: " + name() + " tracks " + std::to_string(s.pending.size()) +
                        " tokens after its registered pages, expected " +
                        std::to_string(s.length - s.registered * m.page_size));
    }
    for (std::size_t i = 0; i < s.pages.size(); ++i) {
      const PageId p = s.pages[i];
      if (p < 0 || p >= n) integrity_failure("page id: " + name() + " holds " + page_name(p));
      const auto at = static_cast<std::size_t>(p);
      if (std::exchange(last_holder[at], ordinal) == ordinal) {
        integrity_failure("page list: " + name() + " holds " + page_name(p) + " twice");
      }
      const std::int64_t used = std::min(m.page_size, s.length - static_cast<std::int64_t>(i) * m.page_size);
      if (filled[at] >= 0 && filled[at] != used) {
        integrity_failure("shared page: " + name() + " uses " + std::to_string(used) + " slots of " +
                          page_name(p) + ", another holder " + std::to_string(filled[at]));
      }
      filled[at] = used;
      ++refs[at];
    }
    if (s.length % m.page_size != 0 && m.page(s.pages.back()).registered) {
      integrity_failure("registered page: " + name() + " holds " + page_name(s.pages.back()) +
                        " partly filled, yet it is in the prefix index");
    }
    // The chain ends at a page the index holds, so the pages registered next are reachable.
    const bool chained = s.chain_serial != kNoParent && s.chain_serial != kLostChain;
    if (chained && !indexed(s.chain_hash, s.chain_serial)) {
      integrity_failure("chain: " + name() + " continues from a page the prefix index no longer holds");
    }
    tokens += s.length;
    ++ordinal;
  }
  if (tokens != m.tokens_stored) {
    integrity_failure("tokens_stored: counter is " + std::to_string(m.tokens_stored) + ", sequences hold " +
                      std::to_string(tokens));
  }

  // Free list: only free pages, each once.
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(n), 0);
  for (PageId p : m.free_pages) {
    if (p < 0 || p >= n || m.page(p).state != PageState::kFree || seen[static_cast<std::size_t>(p)]++) {
      integrity_failure("free list: holds " + page_name(p) + " that is not free or is listed twice");
    }
  }
  // LRU list: only cached pages, each once, links agreeing both ways.
  std::int64_t walked = 0;
  PageId prev = kNoPage;
  for (PageId p = m.lru_head; p != kNoPage; prev = p, p = m.page(p).lru_next) {
    if (p < 0 || p >= n || walked++ >= n || m.page(p).state != PageState::kCached ||
        seen[static_cast<std::size_t>(p)]++) {
      integrity_failure("LRU list: reaches " + page_name(p) + " that is not cached, or loops");
    }
    if (m.page(p).lru_prev != prev) integrity_failure("LRU list: back link of " + page_name(p) + " is wrong");
  }
  if (prev != m.lru_tail || walked != m.lru_size) {
    integrity_failure("LRU list: tail or size disagrees with the list (" + std::to_string(walked) +
                      " walked, size " + std::to_string(m.lru_size) + ")");
  }

  std::int64_t used = 0, registered = 0, copies = 0, listed_copies = 0;
  for (PageId p = 0; p < n; ++p) {
    const Page& pg = m.page(p);
    const std::int64_t r = refs[static_cast<std::size_t>(p)];
    if (pg.ref != r) {
      integrity_failure("ref count: " + page_name(p) + " has ref " + std::to_string(pg.ref) +
                        ", sequences use it " + std::to_string(r) + " times");
    }
    const bool listed = seen[static_cast<std::size_t>(p)] != 0;
    if ((pg.state == PageState::kUsed) != (r > 0) || (pg.state != PageState::kUsed) != listed) {
      integrity_failure("page sets: " + page_name(p) + " is not in exactly one of free / cached / used");
    }
    used += pg.state == PageState::kUsed;
    if (pg.state == PageState::kCached && !pg.registered) {
      integrity_failure("cached page: " + page_name(p) + " has no prefix-index entry");
    }
    if (pg.state == PageState::kFree && pg.registered) {
      integrity_failure("free page: " + page_name(p) + " is still in the prefix index");
    }
    if (pg.original != kNoPage) {
      ++copies;
      if (pg.state != PageState::kUsed || pg.registered) {
        integrity_failure("copy: " + page_name(p) + " is not a used, unregistered page");
      }
    }
    if (!pg.registered) {
      if (pg.first_copy != kNoPage) integrity_failure("copy: unregistered " + page_name(p) + " has copies");
      continue;
    }
    ++registered;
    const auto it = m.index.find(pg.hash);
    if (it == m.index.end() || it->second != p) {
      integrity_failure("prefix index: " + page_name(p) +
                        " is marked registered but the index does not map to it");
    }
    if (detail::hash_page(pg.parent_hash, pg.salt, m.tokens_of(p)) != pg.hash) {
      integrity_failure("prefix index: the key of " + page_name(p) + " does not match its stored tokens");
    }
    // Every entry is reachable: its parent is the page the index holds for the parent's key, and
    // so on back to the root.
    if (pg.parent_serial == kNoParent ? pg.parent_hash != detail::kPrefixHashRoot
                                      : !indexed(pg.parent_hash, pg.parent_serial)) {
      integrity_failure("prefix index: " + page_name(p) + " follows a page the index no longer holds");
    }
    PageId prev_copy = kNoPage;
    for (PageId c = pg.first_copy; c != kNoPage; prev_copy = c, c = m.page(c).copy_next) {
      if (c < 0 || c >= n || listed_copies++ >= n || m.page(c).original != p ||
          m.page(c).copy_prev != prev_copy) {
        integrity_failure("copy: the copies of " + page_name(p) + " list " + page_name(c) +
                          " that is not one of them, or loop");
      }
    }
  }
  if (listed_copies != copies) {
    integrity_failure("copy: " + std::to_string(copies) + " pages are copies, their originals list " +
                      std::to_string(listed_copies));
  }
  if (used != m.used_count) integrity_failure("used count: counter is " + std::to_string(m.used_count));
  if (registered != static_cast<std::int64_t>(m.index.size()) || (!m.caching && registered != 0)) {
    integrity_failure("prefix index: holds " + std::to_string(m.index.size()) + " entries for " +
                      std::to_string(registered) + " registered pages");
  }
}

}  // namespace pagedattn
