#include "cpu/decode_plan.h"

#include <algorithm>

namespace pagedattn::cpu {

namespace {
// Below this many keys a partition costs more in q loads and merging than it gains.
constexpr std::int64_t kMinPartitionTokens = 256;
// Split-K aims at this many work items per thread, so dynamic scheduling can balance them.
constexpr std::int64_t kItemsPerThread = 4;

std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

KeyRange decode_key_range(const detail::AttentionProblem& p, std::int64_t s) {
  const std::int64_t kv_len = p.pages_of(s).kv_len;
  KeyRange r;
  if (kv_len == 0) return r;
  r.query_pos = p.query_end(s) - 1 - p.key_offset(s);
  r.begin = p.variant.window_left >= 0 ? std::max<std::int64_t>(0, r.query_pos - p.variant.window_left) : 0;
  r.end = p.variant.causal ? std::min(kv_len, r.query_pos + 1) : kv_len;
  r.begin = std::min(r.begin, kv_len);
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

DecodePlan plan_decode(const detail::AttentionProblem& p, const DecodeOptions& options,
                       int num_threads, bool heads_together) {
  const std::int64_t S = p.num_seqs, Hkv = p.num_kv_heads, ps = p.kv.page_size;
  const std::int64_t threads = std::max(1, num_threads);
  DecodePlan plan;
  const auto& k = p.kv.k;
  plan.heads_per_item = (Hkv > 1 && (heads_together || k.head_stride < k.token_stride)) ? Hkv : 1;
  const std::int64_t head_items = Hkv / plan.heads_per_item;
  std::vector<KeyRange> ranges(static_cast<std::size_t>(S));
  std::int64_t total = 0, longest = 0, nonempty = 0;
  for (std::int64_t s = 0; s < S; ++s) {
    const KeyRange r = decode_key_range(p, s);
    ranges[static_cast<std::size_t>(s)] = r;
    total += (r.end - r.begin) * head_items;
    longest = std::max(longest, r.end - r.begin);
    nonempty += r.end > r.begin ? head_items : 0;
  }

  if (options.variant != DecodeVariant::kOnePass) {
    std::int64_t partition = options.partition_size;
    if (partition == 0) {
      partition = round_up(std::max(kMinPartitionTokens,
                                    (total + kItemsPerThread * threads - 1) / (kItemsPerThread * threads)),
                           ps);
    }
    // kAuto stays one-pass when the (sequence, head range) items alone keep every thread busy
    // and no single item is longer than half a thread's fair share.
    const bool enough = nonempty >= kItemsPerThread * threads && longest * 2 * threads <= total;
    if (options.variant == DecodeVariant::kSplitK || !enough) plan.partition_size = partition;
  }

  const std::int64_t P = plan.partition_size;
  for (std::int64_t s = 0; s < S; ++s) {
    const KeyRange r = ranges[static_cast<std::size_t>(s)];
    const std::int64_t parts = (P == 0 || r.end == r.begin) ? 1 : (r.end + P - 1) / P - r.begin / P;
    for (std::int64_t h = 0; h < Hkv; h += plan.heads_per_item) {
      const auto seq = static_cast<std::int32_t>(s), head = static_cast<std::int32_t>(h);
      if (parts == 1) {
        plan.items.push_back({seq, head, r.begin, r.end, -1});
        continue;
      }
      plan.merges.push_back({seq, head, plan.num_slots, parts});
      // Partition boundaries sit at multiples of P (a multiple of page_size): whole pages.
      for (std::int64_t b = r.begin; b < r.end; b = (b / P + 1) * P) {
        plan.items.push_back({seq, head, b, std::min(r.end, (b / P + 1) * P), plan.num_slots++});
      }
    }
  }
  // Longest first: the dynamic schedule then ends with short items, balancing ragged batches.
  std::stable_sort(plan.items.begin(), plan.items.end(),
                   [](const DecodeWorkItem& a, const DecodeWorkItem& b) {
                     return a.end - a.begin > b.end - b.begin;
                   });
  return plan;
}

}  // namespace pagedattn::cpu
