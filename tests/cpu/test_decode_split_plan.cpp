// The CUDA decode's split planner (src/cuda/decode_split_plan.h) on the shapes whose plans were
// measured on an H100 (132 SMs; docs/perf-notes.md, CUDA decode): its arithmetic needs no GPU.
#include "cuda/decode_split_plan.h"

#include <gtest/gtest.h>

namespace pagedattn::cuda {
namespace {

constexpr std::int64_t kH100Sms = 132;

// A uniform batch of `seqs` sequences of `len` keys with `kv_heads` CTAs per split.
SplitShape uniform(std::int64_t seqs, std::int64_t len, std::int64_t kv_heads, bool fp8 = false) {
  SplitShape s;
  s.num_seqs = seqs;
  s.max_len = len;
  s.total = seqs * len;
  s.per_seq_ctas = kv_heads;
  s.sms = kH100Sms;
  s.page_size = 16;
  // 16-bit caches in 16-token pages run on the TMA kernel, fp8 ones on the cp.async kernel.
  s.kernel = fp8 ? PlannedKernel::kCpAsync : PlannedKernel::kTma;
  return s;
}

// The same on the cp.async kernel with a 16-bit cache (pages off multiples of 16).
SplitShape cp_async_16bit(std::int64_t seqs, std::int64_t len, std::int64_t kv_heads, std::int64_t page_size) {
  SplitShape s = uniform(seqs, len, kv_heads);
  s.kernel = PlannedKernel::kCpAsync;
  s.page_size = page_size;
  return s;
}

TEST(DecodeSplitPlan, OneWaveGridsOfLongCtasTakeOneCtaPerSm) {
  // GQA 32/8 d-long1: 16 splits of 2048 keys (128 CTAs) instead of 32 of 1024.
  const SplitShape long1 = uniform(1, 32768, 8);
  EXPECT_TRUE(fits_one_cta_per_sm(long1));
  EXPECT_EQ(split_partition_tokens(long1, true), 2048);
  EXPECT_EQ(split_partition_tokens(long1, false), 1024);
  // MHA 32/32 d-long1: 4 splits of 8192 instead of 8 of 4096.
  const SplitShape mha_long1 = uniform(1, 32768, 32);
  EXPECT_TRUE(fits_one_cta_per_sm(mha_long1));
  EXPECT_EQ(split_partition_tokens(mha_long1, true), 8192);
  EXPECT_EQ(split_partition_tokens(mha_long1, false), 4096);
  // 2 x 8192: 8 splits of 1024 instead of 16 of 512.
  EXPECT_TRUE(fits_one_cta_per_sm(uniform(2, 8192, 8)));
  EXPECT_EQ(split_partition_tokens(uniform(2, 8192, 8), true), 1024);
  EXPECT_EQ(split_partition_tokens(uniform(2, 8192, 8), false), 512);
}

TEST(DecodeSplitPlan, ShortCtasUnevenBatchesAndThinWavesKeepTwoPerSm) {
  // 1 x 8192: one CTA per SM would hold 512 keys; the plan stays at 32 splits of 256.
  EXPECT_FALSE(fits_one_cta_per_sm(uniform(1, 8192, 8)));
  EXPECT_EQ(split_partition_tokens(uniform(1, 8192, 8), false), 256);
  // Three units: 44 parts each would become one merge block of 32, 96 CTAs for 132 SMs.
  EXPECT_FALSE(fits_one_cta_per_sm(uniform(1, 200000, 3)));
  // A ragged batch.
  SplitShape ragged = uniform(2, 32768, 8);
  ragged.total = 32768 + 1000;
  EXPECT_TRUE(ragged.ragged());
  EXPECT_FALSE(fits_one_cta_per_sm(ragged));
  // As many units as SMs or more: no split to aim.
  EXPECT_FALSE(fits_one_cta_per_sm(uniform(64, 2048, 8)));
}

TEST(DecodeSplitPlan, FullWavesOfUnitsAreNotSplit) {
  // GQA d-mid16: 128 units on 132 SMs, unsplit (a 16-bit cache).
  EXPECT_EQ(split_partition_tokens(uniform(16, 4096, 8), false), 4096);
  EXPECT_EQ(split_partition_tokens(uniform(16, 4096, 8), true), 4096);
  // ... but an fp8 cache splits it, aiming at four CTAs per SM (its cp.async CTAs alone on an SM
  // stream too slowly): 4 parts, 512 CTAs.
  EXPECT_EQ(split_partition_tokens(uniform(16, 4096, 8, true), false), 1024);
  // GQA d-b64: 512 units, more than the wave; its balanced share exceeds every sequence.
  EXPECT_EQ(split_partition_tokens(uniform(64, 2048, 8), false), 2048);
}

TEST(DecodeSplitPlan, ManyWaveGridsOfLongSequencesSplitIntoShortCtas) {
  // MHA 32/32 d-b32-16k (1024 units, ~3.9 waves of two per SM): 8 parts of 2048 keys; 16 x 16384
  // (512 units) the same.
  EXPECT_EQ(split_partition_tokens(uniform(32, 16384, 32), false), 2048);
  EXPECT_EQ(split_partition_tokens(uniform(16, 16384, 32), false), 2048);
  EXPECT_EQ(split_partition_tokens(uniform(8, 32768, 64), false), 2048);
  // Not split: sequences of 8192 keys or fewer (GQA 64 x 8192, MHA 128 x 4096, MHA d-b64),
  // fewer units than a wave (GQA d-b32-16k: 256 units), ragged batches, the cp.async kernel.
  EXPECT_EQ(split_partition_tokens(uniform(64, 8192, 8), false), 8192);
  EXPECT_EQ(split_partition_tokens(uniform(128, 4096, 32), false), 4096);
  EXPECT_EQ(split_partition_tokens(uniform(64, 2048, 32), false), 2048);
  EXPECT_EQ(split_partition_tokens(uniform(32, 16384, 8), false), 16384);
  SplitShape ragged = uniform(64, 16384, 32);
  ragged.total = 64 * 6000;
  EXPECT_GT(split_partition_tokens(ragged, false), 2048);
  EXPECT_EQ(split_partition_tokens(cp_async_16bit(32, 16384, 32, 8), false), 16384);
}

TEST(DecodeSplitPlan, Fp8CachesAimAtFourCtasPerSm) {
  // GQA 32/8 fp8 d-long1: 64 splits of 512 keys (512 CTAs) where a 16-bit cache takes 32 of 1024.
  EXPECT_EQ(split_partition_tokens(uniform(1, 32768, 8, true), false), 512);
  // MHA 32/32 fp8 d-long1: 16 splits of 2048 (512 CTAs).
  EXPECT_EQ(split_partition_tokens(uniform(1, 32768, 32, true), false), 2048);
  // d-b32-16k: 256 units, two splits each; d-b64's 512 units are not split.
  EXPECT_EQ(split_partition_tokens(uniform(32, 16384, 8, true), false), 8192);
  EXPECT_EQ(split_partition_tokens(uniform(64, 2048, 8, true), false), 2048);
}

TEST(DecodeSplitPlan, CpAsyncKernelAimsAtFourCtasPerSmAndSplitsFullWaves) {
  // bf16 in 1-token pages, 1 x 32768: 64 splits of 512 keys.
  EXPECT_EQ(split_partition_tokens(cp_async_16bit(1, 32768, 8, 1), false), 512);
  // bf16 in 8-token pages, 16 x 4096 (128 units on 132 SMs): 4 splits of 1024, not unsplit.
  EXPECT_EQ(split_partition_tokens(cp_async_16bit(16, 4096, 8, 8), false), 1024);
  // d-b64 in 1-token pages: 512 units, about one wave at four per SM, not split.
  EXPECT_EQ(split_partition_tokens(cp_async_16bit(64, 2048, 8, 1), false), 2048);
}

TEST(DecodeSplitPlan, RaggedBatchesOnTheCpAsyncKernelBalanceOverFourWaves) {
  // 128 sequences averaging 4096 keys, the longest 8192 (d-ragged's kind), 8 KV heads.
  SplitShape ragged = uniform(128, 8192, 8, true);
  ragged.total = 128 * 4096;
  ASSERT_TRUE(ragged.ragged());
  // Balanced share 128 x 4096 x 8 / (4 x 528) = 1986 keys: the longest in 5 parts of 1648.
  EXPECT_EQ(split_partition_tokens(ragged, false), 1648);
  // On the TMA kernel (16-bit, one wave of two per SM): a share of 15888 keys, nothing split.
  ragged.kernel = PlannedKernel::kTma;
  EXPECT_EQ(split_partition_tokens(ragged, false), 8192);
  // Half as many sequences: 512 units, fewer than four per SM but more than half of them, are
  // still balanced over four waves (64 x 4096 x 8 / 2112 = 993 keys: 9 parts of 911, 912 in
  // whole pages), not left one part per unit with the longest sequences trailing.
  SplitShape half = uniform(64, 8192, 8, true);
  half.total = 64 * 4096;
  ASSERT_TRUE(half.ragged());
  EXPECT_EQ(split_partition_tokens(half, false), 912);
}

TEST(DecodeSplitPlan, OtherKernelsKeepTwoPerSmButSplitFullWaves) {
  // f32 on the CUDA-core kernel, 16 x 4096 (128 units on 132 SMs): 2 splits of 2048, not unsplit.
  SplitShape mid16 = uniform(16, 4096, 8);
  mid16.kernel = PlannedKernel::kOther;
  EXPECT_EQ(split_partition_tokens(mid16, false), 2048);
  // 1 x 32768: 32 splits of 1024, as on the TMA kernel.
  SplitShape long1 = uniform(1, 32768, 8);
  long1.kernel = PlannedKernel::kOther;
  EXPECT_EQ(split_partition_tokens(long1, false), 1024);
}

TEST(DecodeSplitPlan, PartsPastOneMergeBlockAreWholeBlocks) {
  EXPECT_EQ(whole_merge_blocks(31), 31);
  EXPECT_EQ(whole_merge_blocks(32), 32);
  EXPECT_EQ(whole_merge_blocks(33), 32);
  EXPECT_EQ(whole_merge_blocks(70), 64);
  // A page size that does not divide the keys: partitions are whole pages.
  SplitShape odd = uniform(1, 32768, 8);
  odd.page_size = 3;
  EXPECT_EQ(split_partition_tokens(odd, false) % 3, 0);
  EXPECT_GE(split_partition_tokens(odd, false) * 32, 32768);
}

TEST(DecodeSplitPlan, WholePagesAtLeastOne) {
  EXPECT_EQ(whole_pages(0, 16), 16);
  EXPECT_EQ(whole_pages(16, 16), 16);
  EXPECT_EQ(whole_pages(17, 16), 32);
  EXPECT_EQ(whole_pages(32768, 3), 32769);
}

TEST(DecodeSplitPlan, CpAsyncFetchesWidenTo128BytesOnOneToTwoWaveGrids) {
  // The H200's grids of v48 (132 SMs): GQA d-b64 (512 CTAs), b128 x 2048 and group 2 (1024)
  // read faster with 128 bytes; b48 x 2048 (384), d-b32-16k (256) and d-b256 (2048) with 256.
  for (std::int64_t ctas : {512, 1024, 396, 1056}) EXPECT_EQ(cp_async_l2_fetch_bytes(128, ctas, 132), 128) << ctas;
  for (std::int64_t ctas : {384, 256, 2048, 395, 1057}) EXPECT_EQ(cp_async_l2_fetch_bytes(128, ctas, 132), 256) << ctas;
  // Only the 128-dim kernel (head_dim 72 to 128): 64 and 256 kept 256 bytes on the same grid.
  EXPECT_EQ(cp_async_l2_fetch_bytes(72, 512, 132), 128);
  EXPECT_EQ(cp_async_l2_fetch_bytes(64, 512, 132), 256);
  EXPECT_EQ(cp_async_l2_fetch_bytes(256, 512, 132), 256);
  EXPECT_EQ(cp_async_l2_fetch_bytes(136, 512, 132), 256);
}

}  // namespace
}  // namespace pagedattn::cuda
