// cascade_decode against the dense oracle and against plain decode over the concatenated pages:
// shared prefixes, nested levels, sequences without a row at some level, variants that force
// the per-sequence path (window, ALiBi) and ones the grouped path must honour (sinks, soft-cap).
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "compare.h"
#include "paged_fixture.h"
#include "pagedattn/ops.h"

namespace pagedattn::testing {
namespace {

struct LevelSpec {
  std::vector<std::int64_t> row_lens;
  std::vector<std::int32_t> seq_to_row;  // empty: row s for sequence s
};

struct Variant {
  int window = -1;
  bool alibi = false, sinks = false;
  float soft_cap = 0.0f;
};

struct CascadeSetup {
  KVLayout layout = KVLayout::kNHD;
  DType kv_dtype = DType::kF16, q_dtype = DType::kF32;
  bool per_head = false;
  std::int64_t page_size = 16, num_q_heads = 8, num_kv_heads = 2, head_dim = 64;
  std::vector<LevelSpec> levels;
  Variant variant;
};

// Runs the cascade, and plain decode where the levels' pages concatenate into one table
// (every row but a sequence's last is page-aligned); compares both with the oracle.
void check_cascade(const CascadeSetup& st, std::uint64_t seed) {
  Rng rng(seed);
  const std::int64_t ps = st.page_size, Hq = st.num_q_heads, D = st.head_dim;
  const auto S = static_cast<std::int64_t>(
      st.levels[0].seq_to_row.empty() ? st.levels[0].row_lens.size() : st.levels[0].seq_to_row.size());
  std::int64_t pages_needed = 4;
  for (const LevelSpec& l : st.levels) {
    for (std::int64_t len : l.row_lens) pages_needed += (len + ps - 1) / ps;
  }
  PagedCache cache(CacheSpec{st.layout, st.kv_dtype, pages_needed, ps, st.num_kv_heads, D, false,
                             st.per_head},
                   rng);
  // Write every level's rows; gather each sequence's dense KV and its concatenated pages.
  std::vector<HostTable> tables;
  std::vector<std::vector<std::int32_t>> maps;
  std::vector<DenseKV> dense(static_cast<std::size_t>(S));
  std::vector<std::vector<std::int32_t>> plain_rows(static_cast<std::size_t>(S));
  std::vector<std::int64_t> plain_lens(static_cast<std::size_t>(S), 0);
  bool concatenable = true;
  for (std::size_t l = 0; l < st.levels.size(); ++l) {
    const LevelSpec& spec = st.levels[l];
    std::vector<std::vector<std::int32_t>> rows;
    std::vector<DenseKV> row_tokens;
    for (std::int64_t len : spec.row_lens) {
      rows.push_back(cache.take_pages((len + ps - 1) / ps));
      row_tokens.push_back(cache.random_tokens(len, rng));
      cache.write(rows.back(), row_tokens.back());
    }
    for (std::int64_t s = 0; s < S; ++s) {
      const std::int32_t r = spec.seq_to_row.empty() ? static_cast<std::int32_t>(s)
                                                     : spec.seq_to_row[static_cast<std::size_t>(s)];
      if (r < 0) continue;
      const auto su = static_cast<std::size_t>(s), ru = static_cast<std::size_t>(r);
      concatenable &= plain_lens[su] % ps == 0;
      dense[su] = DenseKV::concat(dense[su], row_tokens[ru]);
      plain_rows[su].insert(plain_rows[su].end(), rows[ru].begin(), rows[ru].end());
      plain_lens[su] += spec.row_lens[ru];
    }
    tables.emplace_back(rows, spec.row_lens, ps, l % 2 ? TableFormat::kCsr : TableFormat::kBlockTable, rng);
    maps.push_back(spec.seq_to_row);
  }
  std::vector<CascadeLevel> levels;
  for (std::size_t l = 0; l < tables.size(); ++l) {
    levels.push_back({tables[l].view(), maps[l].empty() ? TensorView{}
                                                        : TensorView(maps[l].data(), DType::kI32,
                                                                     {static_cast<std::int64_t>(maps[l].size())})});
  }

  HostTensor q = HostTensor::make(st.q_dtype, {S, Hq, D});
  const std::vector<double> qv = q.fill_random(rng, -4.0, 4.0);
  std::vector<float> alibi, sinks;
  AttentionParams params;
  ReferenceParams ref;
  ref.scale = 1.0f / std::sqrt(static_cast<float>(D));
  params.window_left = ref.window_left = st.variant.window;
  params.logits_soft_cap = st.variant.soft_cap;
  ref.soft_cap = st.variant.soft_cap;
  for (std::int64_t h = 0; h < Hq; ++h) {
    if (st.variant.alibi) alibi.push_back(std::exp2(-static_cast<float>(h + 1)));
    if (st.variant.sinks) sinks.push_back(static_cast<float>(rng.uniform(-1.0, 3.0)));
  }
  if (st.variant.alibi) params.alibi_slopes = TensorView(alibi.data(), DType::kF32, {Hq});
  if (st.variant.sinks) params.sinks = TensorView(sinks.data(), DType::kF32, {Hq});
  ref.alibi_slopes = alibi;
  ref.sinks = sinks;

  std::vector<double> expected(static_cast<std::size_t>(S * Hq * D)), expected_lse(static_cast<std::size_t>(S * Hq));
  for (std::int64_t s = 0; s < S; ++s) {
    const auto q0 = static_cast<std::size_t>(s * Hq * D);
    reference_sequence(std::span(qv).subspan(q0, static_cast<std::size_t>(Hq * D)), 1,
                       dense[static_cast<std::size_t>(s)], Hq, st.num_kv_heads, D, ref,
                       std::span(expected).subspan(q0, static_cast<std::size_t>(Hq * D)),
                       std::span(expected_lse).subspan(static_cast<std::size_t>(s * Hq), static_cast<std::size_t>(Hq)));
  }
  const Tolerance tol = tolerance_for(st.q_dtype);
  for (Implementation impl : {Implementation::kFast, Implementation::kReference}) {
    Context ctx = Context::cpu();
    ctx.implementation = impl;
    HostTensor out = HostTensor::make(st.q_dtype, {S, Hq, D}), lse = HostTensor::make(DType::kF32, {S, Hq});
    const std::vector<std::byte> before = cache.snapshot();
    cascade_decode(ctx, q.view, cache.kv(), levels, params, out.view, lse.view);
    EXPECT_TRUE(cache.snapshot() == before) << "cascade_decode wrote to the cache";
    const char* which = impl == Implementation::kFast ? "fast" : "reference";
    Comparison c = compare(read_values(out.view), expected, tol, "cascade out");
    EXPECT_TRUE(c.passed) << which << ": " << c.message;
    c = compare_lse(read_values(lse.view), expected_lse, "cascade lse");
    EXPECT_TRUE(c.passed) << which << ": " << c.message;
  }
  if (!concatenable) return;
  HostTable plain(plain_rows, plain_lens, ps, TableFormat::kBlockTable, rng);
  HostTensor out = HostTensor::make(st.q_dtype, {S, Hq, D}), lse = HostTensor::make(DType::kF32, {S, Hq});
  decode(Context::cpu(), q.view, cache.kv(), plain.view(), params, out.view, lse.view);
  Comparison c = compare(read_values(out.view), expected, tol, "plain decode out");
  EXPECT_TRUE(c.passed) << c.message;
  c = compare_lse(read_values(lse.view), expected_lse, "plain decode lse");
  EXPECT_TRUE(c.passed) << c.message;
}

class CascadeLayouts : public ::testing::TestWithParam<KVLayout> {};

TEST_P(CascadeLayouts, SharedPrefixTwoLevels) {
  for (DType kv : {DType::kF16, DType::kF8E4M3}) {
    CascadeSetup st;
    st.layout = GetParam();
    st.kv_dtype = kv;
    st.per_head = kv == DType::kF8E4M3;
    st.levels = {{{32}, {0, 0, 0, 0}}, {{0, 1, 17, 40}, {}}};
    check_cascade(st, 1);
  }
}

TEST_P(CascadeLayouts, NestedThreeLevelsWithMissingRows) {
  CascadeSetup st;
  st.layout = GetParam();
  st.q_dtype = DType::kBF16;
  st.kv_dtype = DType::kBF16;
  // A global prefix; two sub-prefixes (sequence 4 has none); own suffixes, one empty.
  st.levels = {{{32}, {0, 0, 0, 0, 0}}, {{16, 48}, {0, 0, 0, 1, -1}}, {{5, 0, 16, 3, 9}, {}}};
  check_cascade(st, 2);
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, CascadeLayouts,
                         ::testing::Values(KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit),
                         [](const ::testing::TestParamInfo<KVLayout>& info) {
                           return std::string(to_string(info.param));
                         });

TEST(Cascade, UnalignedPrefixAndOddPageSize) {
  CascadeSetup st;
  st.page_size = 3;
  st.num_q_heads = 5;
  st.num_kv_heads = 1;
  st.head_dim = 80;
  st.levels = {{{22}, {0, 0, 0}}, {{1, 0, 30}, {}}};
  check_cascade(st, 3);
}

// Window and ALiBi depend on positions, so each sequence attends its own copy of the level.
TEST(Cascade, PositionalVariantsUsePerSequencePositions) {
  for (Variant v : {Variant{.window = 20}, Variant{.alibi = true}, Variant{.window = 40, .alibi = true}}) {
    CascadeSetup st;
    st.variant = v;
    st.levels = {{{32}, {0, 0, 0, 0, 0}}, {{16, 48}, {0, 0, 0, 1, -1}}, {{5, 0, 16, 3, 9}, {}}};
    check_cascade(st, 4);
  }
}

TEST(Cascade, SinksAndSoftCapOnTheGroupedPath) {
  for (Variant v : {Variant{.sinks = true}, Variant{.soft_cap = 3.0f},
                    Variant{.sinks = true, .soft_cap = 10.0f}}) {
    CascadeSetup st;
    st.variant = v;
    st.levels = {{{48}, {0, 0, 0, 0}}, {{7, 0, 33, 16}, {}}};
    check_cascade(st, 5);
  }
}

// A sequence with no KV at any level attends nothing: output 0, LSE -inf (or the sink alone).
TEST(Cascade, SequenceWithoutAnyRow) {
  for (bool sinks : {false, true}) {
    CascadeSetup st;
    st.variant.sinks = sinks;
    st.levels = {{{16}, {0, -1, 0}}, {{4, 0, 9}, {}}};
    check_cascade(st, 6);
  }
}

// No row shared by two sequences: every level runs per sequence.
TEST(Cascade, UnsharedRowsAndReorderedMapping) {
  CascadeSetup st;
  st.num_q_heads = 4;
  st.num_kv_heads = 4;
  st.levels = {{{16, 32, 0}, {2, 0, 1}}, {{3, 17, 8}, {}}};
  check_cascade(st, 7);
}

}  // namespace
}  // namespace pagedattn::testing
