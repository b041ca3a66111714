// find_shared_prefixes: the levels it lays out for known sharing patterns (none, partial,
// nested, sharing that would end inside a page, runs that do not pay), and cascade_decode over
// its layout against plain decode and the dense oracle on a cache with forks, and decode
// running that cascade by itself.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "compare.h"
#include "paged_fixture.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"
#include "pagedattn/shared_prefix.h"

namespace pagedattn::testing {
namespace {

constexpr std::int64_t kPage = 16;

// A block table over rows of page ids with their lengths.
BlockTableData block_table(const std::vector<std::vector<std::int32_t>>& rows, const std::vector<std::int32_t>& lens) {
  BlockTableData t;
  t.num_seqs = static_cast<std::int64_t>(rows.size());
  for (const auto& r : rows) t.max_pages = std::max<std::int64_t>(t.max_pages, static_cast<std::int64_t>(r.size()));
  t.block_table.assign(static_cast<std::size_t>(t.num_seqs * t.max_pages), -1);
  for (std::size_t s = 0; s < rows.size(); ++s) {
    std::copy(rows[s].begin(), rows[s].end(), t.block_table.begin() + static_cast<std::ptrdiff_t>(s * static_cast<std::size_t>(t.max_pages)));
  }
  t.seq_lens = lens;
  return t;
}

// Row r of a level as (pages, tokens).
struct Row {
  std::vector<std::int32_t> pages;
  std::int64_t tokens = 0;
  bool operator==(const Row&) const = default;
};
Row row_of(const CascadeLayout::Level& level, std::int32_t r) {
  const auto ru = static_cast<std::size_t>(r);
  const auto& t = level.table;
  Row out;
  out.pages.assign(t.indices.begin() + t.indptr[ru], t.indices.begin() + t.indptr[ru + 1]);
  out.tokens = static_cast<std::int64_t>(out.pages.size() - 1) * kPage + t.last_page_len[ru];
  return out;
}
// The row sequence s reads at level l, or an empty row.
Row seq_row(const CascadeLayout& layout, std::size_t l, std::size_t s) {
  const std::int32_t r = layout.levels[l].seq_to_row[s];
  return r < 0 ? Row{} : row_of(layout.levels[l], r);
}

CascadeLayout find(const std::vector<std::vector<std::int32_t>>& rows, const std::vector<std::int32_t>& lens,
                   std::int64_t min_saved = 0) {
  BlockTableData t = block_table(rows, lens);
  return find_shared_prefixes(t.view(), kPage, SharedPrefixOptions{min_saved});
}

TEST(SharedPrefix, NoSharingKeepsEachSequencesPages) {
  const CascadeLayout layout = find({{4, 5}, {6}, {}, {7, 8, 9}}, {20, 16, 0, 33});
  ASSERT_EQ(layout.levels.size(), 1u);
  EXPECT_EQ(layout.shared_levels(), 0);
  EXPECT_EQ(seq_row(layout, 0, 0), (Row{{4, 5}, 20}));
  EXPECT_EQ(seq_row(layout, 0, 1), (Row{{6}, 16}));
  EXPECT_EQ(layout.levels[0].seq_to_row[2], -1);  // no KV at all
  EXPECT_EQ(seq_row(layout, 0, 3), (Row{{7, 8, 9}, 33}));
  EXPECT_EQ(layout.tokens_plain, 69);
  EXPECT_EQ(layout.tokens_cascade, 69);
}

TEST(SharedPrefix, PartialSharing) {
  // Sequences 0 and 2 share four full pages; 1 shares nothing.
  const CascadeLayout layout = find({{1, 2, 3, 4, 10}, {20, 21}, {1, 2, 3, 4, 11, 12}}, {70, 30, 90});
  ASSERT_EQ(layout.levels.size(), 2u);
  EXPECT_EQ(layout.levels[0].seq_to_row, (std::vector<std::int32_t>{0, -1, 0}));
  EXPECT_EQ(row_of(layout.levels[0], 0), (Row{{1, 2, 3, 4}, 64}));
  EXPECT_EQ(seq_row(layout, 1, 0), (Row{{10}, 6}));
  EXPECT_EQ(seq_row(layout, 1, 1), (Row{{20, 21}, 30}));
  EXPECT_EQ(seq_row(layout, 1, 2), (Row{{11, 12}, 26}));
  EXPECT_EQ(layout.tokens_plain, 190);
  EXPECT_EQ(layout.tokens_cascade, 190 - 64);
}

TEST(SharedPrefix, NestedSharingMakesDeeperLevels) {
  // All three share pages 1, 2; sequences 0 and 1 also share 3, 4; sequence 3 only page 1.
  const CascadeLayout layout =
      find({{1, 2, 3, 4, 5}, {1, 2, 3, 4, 6}, {1, 2, 7}, {1, 8}}, {72, 80, 40, 20});
  ASSERT_EQ(layout.levels.size(), 4u);
  EXPECT_EQ(seq_row(layout, 0, 3), (Row{{1}, 16}));
  for (std::size_t s : {0u, 1u, 2u, 3u}) EXPECT_EQ(seq_row(layout, 0, s), (Row{{1}, 16})) << s;
  for (std::size_t s : {0u, 1u, 2u}) EXPECT_EQ(seq_row(layout, 1, s), (Row{{2}, 16})) << s;
  EXPECT_EQ(layout.levels[1].seq_to_row[3], -1);
  for (std::size_t s : {0u, 1u}) EXPECT_EQ(seq_row(layout, 2, s), (Row{{3, 4}, 32})) << s;
  EXPECT_EQ(layout.levels[2].seq_to_row[2], -1);
  EXPECT_EQ(seq_row(layout, 3, 0), (Row{{5}, 8}));
  EXPECT_EQ(seq_row(layout, 3, 1), (Row{{6}, 16}));
  EXPECT_EQ(seq_row(layout, 3, 2), (Row{{7}, 8}));
  EXPECT_EQ(seq_row(layout, 3, 3), (Row{{8}, 4}));
}

TEST(SharedPrefix, PartlyFilledPagesAreNeverShared) {
  // Page 3 is full for sequence 1 but holds only 8 of sequence 0's tokens; page 9 is the last,
  // partly filled page of both 2 and 3: sharing would end inside those pages.
  const CascadeLayout layout = find({{1, 2, 3}, {1, 2, 3, 4}, {5, 9}, {5, 9}}, {40, 60, 20, 24});
  ASSERT_EQ(layout.levels.size(), 2u);
  EXPECT_EQ(seq_row(layout, 0, 0), (Row{{1, 2}, 32}));
  EXPECT_EQ(seq_row(layout, 0, 1), (Row{{1, 2}, 32}));
  EXPECT_EQ(seq_row(layout, 0, 2), (Row{{5}, 16}));
  EXPECT_EQ(seq_row(layout, 0, 3), (Row{{5}, 16}));
  EXPECT_EQ(seq_row(layout, 1, 0), (Row{{3}, 8}));
  EXPECT_EQ(seq_row(layout, 1, 1), (Row{{3, 4}, 28}));
  EXPECT_EQ(seq_row(layout, 1, 2), (Row{{9}, 4}));
  EXPECT_EQ(seq_row(layout, 1, 3), (Row{{9}, 8}));
}

TEST(SharedPrefix, SequenceWhollyInsideASharedRun) {
  const CascadeLayout layout = find({{1, 2}, {1, 2, 3}}, {32, 40});
  ASSERT_EQ(layout.levels.size(), 2u);
  EXPECT_EQ(seq_row(layout, 0, 0), (Row{{1, 2}, 32}));
  EXPECT_EQ(layout.levels[1].seq_to_row[0], -1);
  EXPECT_EQ(seq_row(layout, 1, 1), (Row{{3}, 8}));
}

TEST(SharedPrefix, RunsThatDoNotPayStayWithTheirSequences) {
  // Page 1 is shared by three sequences (saves 2 * 16 tokens), pages 2..9 by two (saves 128).
  const std::vector<std::vector<std::int32_t>> rows = {
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 20}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 21}, {1, 30}};
  const std::vector<std::int32_t> lens = {150, 150, 20};
  {
    const CascadeLayout layout = find(rows, lens, 1000);  // nothing pays
    ASSERT_EQ(layout.levels.size(), 1u);
    EXPECT_EQ(seq_row(layout, 0, 0), (Row{rows[0], 150}));
  }
  {
    // Only the two-sequence run pays; the page before it joins it.
    const CascadeLayout layout = find(rows, lens, 100);
    ASSERT_EQ(layout.levels.size(), 2u);
    EXPECT_EQ(seq_row(layout, 0, 0), (Row{{1, 2, 3, 4, 5, 6, 7, 8, 9}, 144}));
    EXPECT_EQ(layout.levels[0].seq_to_row[2], -1);
    EXPECT_EQ(seq_row(layout, 1, 2), (Row{{1, 30}, 20}));
    EXPECT_EQ(seq_row(layout, 1, 1), (Row{{21}, 6}));
  }
  {
    const CascadeLayout layout = find(rows, lens, 0);  // both pay
    ASSERT_EQ(layout.levels.size(), 3u);
    EXPECT_EQ(seq_row(layout, 0, 2), (Row{{1}, 16}));
    EXPECT_EQ(seq_row(layout, 1, 0), (Row{{2, 3, 4, 5, 6, 7, 8, 9}, 128}));
  }
}

TEST(SharedPrefix, CsrInputGivesTheSameLayout) {
  BlockTableData bt = block_table({{1, 2, 3, 4, 10}, {20, 21}, {1, 2, 3, 4, 11, 12}}, {70, 30, 90});
  CsrPageTableData csr = to_csr(bt.view(), kPage);
  const CascadeLayout a = find_shared_prefixes(bt.view(), kPage, SharedPrefixOptions{0});
  const CascadeLayout b = find_shared_prefixes(csr.view(), kPage, SharedPrefixOptions{0});
  // The same CSR with its indices every other element of a buffer (the ops take contiguous
  // CSR tensors only; the search copies such a table first).
  std::vector<std::int32_t> spread(2 * csr.indices.size(), -7);
  for (std::size_t i = 0; i < csr.indices.size(); ++i) spread[2 * i] = csr.indices[i];
  CsrPageTable strided = csr.view();
  strided.indices = TensorView(spread.data(), DType::kI32, {static_cast<std::int64_t>(csr.indices.size())}, {2});
  const CascadeLayout c = find_shared_prefixes(strided, kPage, SharedPrefixOptions{0});
  ASSERT_EQ(a.levels.size(), b.levels.size());
  ASSERT_EQ(a.levels.size(), c.levels.size());
  for (std::size_t l = 0; l < a.levels.size(); ++l) {
    for (const CascadeLayout* other : {&b, &c}) {
      EXPECT_EQ(a.levels[l].seq_to_row, other->levels[l].seq_to_row);
      EXPECT_EQ(a.levels[l].table.indices, other->levels[l].table.indices);
      EXPECT_EQ(a.levels[l].table.last_page_len, other->levels[l].table.last_page_len);
    }
  }
}

TEST(SharedPrefix, BadInputIsRejected) {
  BlockTableData t = block_table({{1, 2}}, {20});
  EXPECT_THROW(find_shared_prefixes(t.view(), 0, {}), Error);
  EXPECT_THROW(find_shared_prefixes(t.view(), kPage, SharedPrefixOptions{-1}), Error);
  t.block_table[1] = -3;  // a page the sequence uses
  EXPECT_THROW(find_shared_prefixes(t.view(), kPage, {}), Error);
  t.block_table[1] = 2;
  t.seq_lens[0] = 40;  // more tokens than its two pages hold
  EXPECT_THROW(find_shared_prefixes(t.view(), kPage, {}), Error);
}

// Forks of a system prompt, forks of those, a fork that stops inside the prompt's last page,
// and unrelated sequences: cascade_decode over the found layout equals decode and the oracle.
TEST(SharedPrefix, CascadeOverTheLayoutEqualsDecode) {
  Rng rng(7);
  const std::int64_t Hq = 8, Hkv = 2, D = 64, P = kPage;
  PagedCache cache(CacheSpec{KVLayout::kNHD, DType::kF16, 64, P, Hkv, D}, rng);
  auto segment = [&](std::int64_t pages, std::int64_t tokens) {
    std::pair<std::vector<std::int32_t>, DenseKV> seg{cache.take_pages(pages), cache.random_tokens(tokens, rng)};
    cache.write(seg.first, seg.second);
    return seg;
  };
  const auto prompt = segment(4, 4 * P), branch_a = segment(2, 2 * P), branch_b = segment(3, 3 * P);
  struct Seq {
    std::vector<std::int32_t> pages;
    DenseKV kv;
  };
  std::vector<Seq> seqs;
  auto add = [&](std::vector<const std::pair<std::vector<std::int32_t>, DenseKV>*> parts, std::int64_t own_tokens) {
    Seq s;
    for (const auto* part : parts) {
      s.pages.insert(s.pages.end(), part->first.begin(), part->first.end());
      s.kv = DenseKV::concat(s.kv, part->second);
    }
    if (own_tokens > 0) {
      const auto own = segment((own_tokens + P - 1) / P, own_tokens);
      s.pages.insert(s.pages.end(), own.first.begin(), own.first.end());
      s.kv = DenseKV::concat(s.kv, own.second);
    }
    seqs.push_back(std::move(s));
  };
  add({&prompt, &branch_a}, 5);
  add({&prompt, &branch_a}, 17);
  add({&prompt, &branch_b}, 1);
  add({&prompt, &branch_b}, 0);
  add({&prompt}, 40);
  add({}, 33);
  // A fork that stops 9 tokens into the prompt's last page (shares it only partly).
  Seq partial = seqs[4];
  partial.pages.resize(4);
  partial.kv.len = 3 * P + 9;
  partial.kv.k.resize(static_cast<std::size_t>(partial.kv.len * Hkv * D));
  partial.kv.v.resize(partial.kv.k.size());
  seqs.push_back(partial);

  const auto S = static_cast<std::int64_t>(seqs.size());
  std::vector<std::vector<std::int32_t>> rows;
  std::vector<std::int32_t> lens;
  for (const Seq& s : seqs) {
    rows.push_back(s.pages);
    lens.push_back(static_cast<std::int32_t>(s.kv.len));
  }
  BlockTableData table = block_table(rows, lens);
  CascadeLayout layout = find_shared_prefixes(table.view(), P, SharedPrefixOptions{0});
  ASSERT_EQ(layout.shared_levels(), 3);  // prompt pages 0-2 (7 users), page 3 (5), branches a, b
  EXPECT_LT(layout.tokens_cascade, layout.tokens_plain);

  HostTensor q = HostTensor::make(DType::kF32, {S, Hq, D});
  const std::vector<double> qv = q.fill_random(rng, -2.0, 2.0);
  ReferenceParams ref;
  ref.scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> expected(static_cast<std::size_t>(S * Hq * D)), expected_lse(static_cast<std::size_t>(S * Hq));
  for (std::int64_t s = 0; s < S; ++s) {
    const auto q0 = static_cast<std::size_t>(s * Hq * D);
    reference_sequence(std::span(qv).subspan(q0, static_cast<std::size_t>(Hq * D)), 1, seqs[static_cast<std::size_t>(s)].kv,
                       Hq, Hkv, D, ref, std::span(expected).subspan(q0, static_cast<std::size_t>(Hq * D)),
                       std::span(expected_lse).subspan(static_cast<std::size_t>(s * Hq), static_cast<std::size_t>(Hq)));
  }
  const std::vector<CascadeLevel> levels = layout.views();
  HostTensor out = HostTensor::make(DType::kF32, {S, Hq, D}), lse = HostTensor::make(DType::kF32, {S, Hq});
  cascade_decode(Context::cpu(), q.view, cache.kv(), levels, AttentionParams{}, out.view, lse.view);
  Comparison c = compare(read_values(out.view), expected, tolerance_for(DType::kF32), "cascade out");
  EXPECT_TRUE(c.passed) << c.message;
  c = compare_lse(read_values(lse.view), expected_lse, "cascade lse");
  EXPECT_TRUE(c.passed) << c.message;

  // decode, plain and finding the layout by itself: the latter is the cascade, bit for bit.
  for (const bool use_cascade : {false, true}) {
    DecodeOptions options;
    options.cascade = use_cascade;
    options.cascade_min_saved_tokens = 0;
    HostTensor dec = HostTensor::make(DType::kF32, {S, Hq, D}), dec_lse = HostTensor::make(DType::kF32, {S, Hq});
    decode(Context::cpu(), q.view, cache.kv(), table.view(), AttentionParams{}, dec.view, dec_lse.view, options);
    c = compare(read_values(dec.view), expected, tolerance_for(DType::kF32), "decode out");
    EXPECT_TRUE(c.passed) << c.message;
    c = compare_lse(read_values(dec_lse.view), expected_lse, "decode lse");
    EXPECT_TRUE(c.passed) << c.message;
    if (use_cascade) {
      EXPECT_EQ(read_values(dec.view), read_values(out.view)) << "decode did not run as the cascade";
      EXPECT_EQ(read_values(dec_lse.view), read_values(lse.view));
    }
  }
}

}  // namespace
}  // namespace pagedattn::testing
