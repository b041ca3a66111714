// pagedattn — the KV cache manager: which pages of the pool each sequence owns.
//
// Host-only bookkeeping (it never touches K/V memory): a block pool with O(1) allocate/free,
// per-sequence page lists, reference counts so sequences can share pages (fork, prefix hits),
// copy-on-write when a shared, partly filled last page is appended to, prefix caching of full
// pages by chained hashes, and LRU eviction of cached pages nobody references.
//
// Reserving slots and writing K/V into them are separate steps (chunked prefill writes a prompt
// over several steps; a sequence can be preempted in between), so a full page becomes available
// to prefix hits only once the caller reports its K/V written with mark_computed: a reserved
// but uncomputed page is never hit. Prefix hits of add_sequence count as computed (num_computed
// starts at num_cached_tokens); fork copies the parent's computed count; freeing a partly
// computed sequence simply releases its uncomputed pages, which were never registered.
//
// Queries (can_*) are const; the commits that follow a true answer cannot fail, except for
// running out of host memory. Every commit either succeeds or throws (Error, or std::bad_alloc
// when an allocation fails) and changes nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pagedattn/page_table.h"

namespace pagedattn {

using SeqId = std::int64_t;
using PageId = std::int32_t;
using TokenId = std::int32_t;

struct KVCacheManagerConfig {
  std::int64_t num_pages = 0;   // pages in the pool, > 0
  std::int64_t page_size = 16;  // tokens per page, >= 1
  bool enable_prefix_caching = true;
};

// A page copy the caller must perform (copy_blocks) before writing into `dst`.
struct PageCopy {
  PageId src = 0;
  PageId dst = 0;
};

struct CacheMetrics {
  std::int64_t pages_total = 0;
  std::int64_t pages_used = 0;    // referenced by at least one sequence
  std::int64_t pages_cached = 0;  // unreferenced, holding a cached prefix page (evictable)
  std::int64_t pages_free = 0;    // unreferenced and empty
  std::int64_t tokens_stored = 0;            // sum of live sequences' lengths
  double internal_fragmentation_pct = 0.0;   // unused slots in used pages / slots of used pages
  std::int64_t prefix_pages_queried = 0;     // full prompt pages looked up in the prefix cache
  std::int64_t prefix_pages_hit = 0;
  double prefix_hit_rate() const {
    return prefix_pages_queried ? static_cast<double>(prefix_pages_hit) / prefix_pages_queried : 0.0;
  }
};

// Result of adding a sequence: its id and how many leading prompt tokens already have their
// K/V in the cache (prefix hits; always a multiple of page_size and < the prompt length, so the
// last prompt token is always computed).
struct AddedSequence {
  SeqId id = 0;
  std::int64_t num_cached_tokens = 0;
};

class KVCacheManager {
 public:
  explicit KVCacheManager(const KVCacheManagerConfig& config);
  ~KVCacheManager();
  KVCacheManager(KVCacheManager&&) noexcept;
  KVCacheManager& operator=(KVCacheManager&&) noexcept;

  std::int64_t page_size() const;
  std::int64_t num_pages() const;

  // ---- queries (const) ----
  // Could add_sequence(prompt, salt) succeed now (counting prefix hits and evictable pages)?
  bool can_allocate(std::span<const TokenId> prompt, std::uint64_t salt = 0) const;
  // Could append(seq, num_tokens) succeed now (counting a copy-on-write page)?
  bool can_append(SeqId seq, std::int64_t num_tokens) const;
  bool contains(SeqId seq) const;

  // ---- commits ----
  // A new sequence holding `prompt` (its slots reserved; K/V of the first num_cached_tokens
  // are already in the cache). `salt` separates prefix-cache namespaces (e.g. per LoRA).
  // Throws Error(kOutOfBlocks) when the pool cannot hold it.
  AddedSequence add_sequence(std::span<const TokenId> prompt, std::uint64_t salt = 0);
  // Reserves slots for `tokens` at the end of `seq`. Returns the page copies to run first
  // (copy-on-write of a shared, partly filled last page). Throws kOutOfBlocks, changing nothing.
  std::vector<PageCopy> append(SeqId seq, std::span<const TokenId> tokens);
  // A new sequence sharing all of `parent`'s pages (n > 1 sampling, beam search).
  SeqId fork(SeqId parent);
  // The K/V of the first `num_tokens` tokens of `seq` are now in the cache: its full pages among
  // them become available to prefix hits. num_tokens must be in [0, length(seq)] (else
  // kInvalidArgument); a value below the one already marked is a no-op.
  void mark_computed(SeqId seq, std::int64_t num_tokens);
  // Releases the sequence; its computed full pages stay in the prefix cache until evicted.
  void free(SeqId seq);

  // ---- page tables ----
  std::int64_t length(SeqId seq) const;
  // Leading tokens of `seq` whose K/V are in the cache (prefix hits and mark_computed).
  std::int64_t num_computed(SeqId seq) const;
  std::span<const PageId> pages(SeqId seq) const;
  // Cache slot (page * page_size + offset) of token `index` of `seq`.
  std::int64_t slot(SeqId seq, std::int64_t index) const;
  // Page tables of `seqs`, in order, in either format.
  BlockTableData block_table(std::span<const SeqId> seqs) const;
  CsrPageTableData csr(std::span<const SeqId> seqs) const;

  CacheMetrics metrics() const;
  // Verifies every invariant (ref counts equal the number of uses, no sequence lists a page twice,
  // a shared page filled alike in all its holders, free / cached / used sets disjoint and
  // covering the pool, hash index consistent and every entry in it reachable, LRU list
  // consistent); throws Error(kInternal) naming the first broken one.
  void check_integrity() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagedattn
