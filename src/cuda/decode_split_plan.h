// Internal: the CUDA decode's split-K planner and grid rules as arithmetic on host-side numbers
// (no device query, no CUDA header), so that its rules are tested without a GPU (tests/cpu/
// test_decode_split_plan.cpp). plan_decode (decode.cu) gathers the numbers and asks the device
// the questions this cannot answer (SM count, whether the Hopper TMA kernel runs).
#pragma once

#include <algorithm>
#include <cstdint>

namespace pagedattn::cuda {

constexpr std::int64_t kMinPartitionTokens = 256;  // below this the merge outweighs the gain
constexpr std::int64_t kOneCtaPerSmKeys = 1024;    // the one-CTA-per-SM rule's shortest CTA
// Many-wave TMA grids of sequences longer than kLongCtaKeys are cut into kManyWaveSplitKeys
// parts (split_partition_tokens says why).
constexpr std::int64_t kLongCtaKeys = 8192;
constexpr std::int64_t kManyWaveSplitKeys = 2048;
// Splits the CTA-per-row merge takes per L2 round trip (a block of their rows in registers).
constexpr int kMergeBlock = 32;

// The decode kernels as the split rules tell them apart.
enum class PlannedKernel {
  kTma,      // the tensor-core kernel with TMA tiles (Hopper, 16-bit caches): deep copy pipelines
  kCpAsync,  // the 64- and 128-dim tensor-core kernel with cp.async tiles: two-warp CTAs keep fewer
             // bytes in flight, four fit on an SM
  kOther,    // the CUDA-core kernel, the 256-dim cp.async one
};

// What the planner reads of a batch and a device.
struct SplitShape {
  std::int64_t num_seqs = 0;
  std::int64_t max_len = 0, total = 0;  // the longest sequence's keys, all sequences' keys
  std::int64_t per_seq_ctas = 1;        // CTAs of one split of a sequence: KV heads x head tiles
  std::int64_t sms = 1;
  std::int64_t page_size = 1;
  PlannedKernel kernel = PlannedKernel::kTma;

  // Uneven lengths: sum < 0.9 x batch x longest.
  bool ragged() const { return total * 10 < max_len * num_seqs * 9; }
  // (sequence, head tile) units of the whole batch: its CTAs when nothing is split.
  std::int64_t units() const { return std::max<std::int64_t>(1, num_seqs * per_seq_ctas); }
};

// `keys` rounded up to whole pages, at least one page.
inline std::int64_t whole_pages(std::int64_t keys, std::int64_t page_size) {
  return std::max<std::int64_t>(page_size, (keys + page_size - 1) / page_size * page_size);
}

// The number of equal parts of the longest sequence: past one merge block, whole blocks (a
// 33rd split costs the merge a second round trip for 3% more CTAs; H100 d-long1: 32 splits
// 56.8-57.1 us, 33 splits 58.8-59.0).
inline std::int64_t whole_merge_blocks(std::int64_t parts) {
  return parts > kMergeBlock ? parts / kMergeBlock * kMergeBlock : parts;
}

// Whether the batch qualifies for one four-warp CTA per SM instead of two two-warp ones (on the
// Hopper TMA kernel, the only one with four-warp CTAs, whose warps balance their tiles: the
// caller checks both; with the fixed interleave two CTAs per SM were as fast or faster, v44).
// A uniform batch of fewer units than SMs whose equal parts give 90-100% of the SMs one CTA of
// at least kOneCtaPerSmKeys keys: one CTA per SM, half the splits to merge. H100, GQA 32/8 and MHA 32/32
// (docs/perf-notes.md, CUDA decode v43): 1 x 32768 -0.7% / -1.1%, 2 x 8192 -2%, 2 x 16384 -1.6% /
// -0.8%, 8 x 2048 -0.9%, 4 x 4096 +0.6%, 4 x 8192 +0.2%; CTAs of 512 keys lost (1 x 8192 +2.3%).
inline bool fits_one_cta_per_sm(const SplitShape& s) {
  const std::int64_t units = s.units();
  if (s.ragged() || units >= s.sms) return false;
  const std::int64_t parts = whole_merge_blocks(s.sms / units);
  return units * parts * 10 >= s.sms * 9 && (s.max_len + parts - 1) / parts >= kOneCtaPerSmKeys;
}

// Keys per split of the planner's choice (a multiple of the page size; at least the longest
// sequence when nothing is split). `one_cta_per_sm`: aim at one CTA per SM (fits_one_cta_per_sm
// and the kernel has four-warp CTAs), else two (four on the cp.async kernel, below).
//   Aim for one full wave of target CTAs. A batch with fewer units than that splits every
// sequence into the same number of equal parts, so the wave stays whole; a larger batch (on the
// cp.async kernel also a ragged one of more than half the target's units) only splits sequences
// longer than a balanced share of all keys. Two CTAs per SM: longer splits, fewer merges. (The
// TMA kernel's two-warp GQA CTAs fit four per SM; aiming for four made d-long1 and d-ragged
// slower there: shorter splits.)
//   A batch of near-equal lengths whose units already give nearly every SM one CTA is not split:
// the splits would only add CTA starts and a merge (H100 d-mid16, 128 units on 132 SMs: unsplit
// 100.5-100.7 us, two splits each 102.4-102.7, four 102.4-102.5). That holds for 16-bit caches
// on the TMA kernel, whose one-CTA-per-SM grids take four-warp CTAs; the other kernels' CTAs
// alone on an SM stream far below its share (H100, 16 x 4096 fp8 e4m3: unsplit 93.4 us, two
// splits 62.5; H200, bf16 in 8-token pages: unsplit 234.8 us, four splits 76.5; f32 on the
// CUDA-core kernel: unsplit 295.9 us, two splits 181.2), so there those batches split as any other.
//   On the TMA kernel, a uniform batch of more units than one wave of target CTAs whose
// sequences exceed kLongCtaKeys is cut into parts of kManyWaveSplitKeys: CTAs of 16384 keys
// run ~0.5 ms each, and the SMs that stream slower (v54's timeline saw ~10% of them ~20% behind)
// then hold the grid's last wave, where parts of 2048 keys let the block scheduler hand the
// faster SMs more of them. H200, 2 rounds in each of two calls (docs/perf-notes.md v57): MHA
// 32 x 16384 0.979 / 0.979 of the unsplit time at 2048 keys (1024: 0.981, 4096: 0.990), MHA
// 16 x 16384 0.986 (1024 and 4096 the same); no gain where CTAs are 8192 keys or shorter (GQA
// 64 x 8192 0.999 at 2048, MHA 128 x 4096 1.001) or fewer than a wave (GQA 32 x 16384).
//   The cp.async kernel aims for four CTAs per SM (they fit), and a ragged batch's balanced share
// over four such waves, so that its longest sequences do not trail alone (H200, docs/perf-notes.md
// v49): 1 x 32768 fp8 e4m3 29.6 us with 512-key splits (64 parts, 512 CTAs) against 37.0 with the
// two-per-SM plan's 1024, bf16 in 1-token pages 48.5 against 68.2; 16 x 4096 fp8 44.3 at 1024
// keys against 62.3 at 2048; d-ragged fp8 315-321 us at 1024-2048 keys against 382.5 at 4096.
inline std::int64_t split_partition_tokens(const SplitShape& s, bool one_cta_per_sm) {
  const std::int64_t units = s.units();
  const bool cp_async = s.kernel == PlannedKernel::kCpAsync;
  const std::int64_t target = one_cta_per_sm ? s.sms : (cp_async ? 4 : 2) * s.sms;
  const bool splits_full_waves = s.kernel != PlannedKernel::kTma;
  std::int64_t share = 0;
  if (!s.ragged() && units * 10 >= s.sms * 9 && units <= s.sms && !splits_full_waves) {
    share = s.max_len;
  } else if (units < target && !(cp_async && s.ragged() && units * 2 > target)) {
    // (On the cp.async kernel, a ragged batch of one part per unit would leave its longest
    // sequences trailing: it takes the balanced share over four waves below.)
    share = (s.max_len + target / units - 1) / (target / units);
  } else {
    const std::int64_t waves = cp_async && s.ragged() ? 4 : 1;
    share = (s.total * s.per_seq_ctas + waves * target - 1) / (waves * target);
    if (s.kernel == PlannedKernel::kTma && !s.ragged() && units > target && s.max_len > kLongCtaKeys) {
      share = std::min(share, kManyWaveSplitKeys);
    }
  }
  // The longest sequence in equal parts: a short last part would cost a whole CTA start and a
  // merge input for little work.
  share = std::max(share, kMinPartitionTokens);
  const std::int64_t parts = whole_merge_blocks(std::max<std::int64_t>(1, (s.max_len + share - 1) / share));
  return whole_pages((s.max_len + parts - 1) / parts, s.page_size);
}

// How far L2 widens the cp.async tile copies' fetches (128 or 256 bytes) for a grid of `ctas`
// CTAs. On an H200 (docs/perf-notes.md, v48), the 128-dim kernel's grids of about one to two
// waves (3 to 8 CTAs per SM; four fit) read 4-10% faster with 128 bytes than with 256 (fp8 in
// every layout, group sizes 2 and 4; bf16 pages of 1 and 8), while grids under one wave and the
// 4-wave ones read 5-7% faster with 256, as did head_dim 64 and 256. Measured, not derived: MHA
// 768 CTAs and GQA 3072 CTAs were 1% from the rule.
inline int cp_async_l2_fetch_bytes(std::int64_t head_dim, std::int64_t ctas, std::int64_t sms) {
  const bool one_to_two_waves = ctas >= 3 * sms && ctas <= 8 * sms;
  return head_dim > 64 && head_dim <= 128 && one_to_two_waves ? 128 : 256;
}

}  // namespace pagedattn::cuda
