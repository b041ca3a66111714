// Page tables: to_csr / to_block_table round trips on random tables whose unused entries hold
// garbage, strided inputs, errors, and ops over degenerate but legal tables.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "expect_error.h"
#include "paged_fixture.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"
#include "pagedattn/page_table.h"

namespace pagedattn::testing {
namespace {

// A random block table: used entries are distinct page ids, unused ones garbage.
struct RandomTable {
  std::int64_t num_seqs, max_pages, page_size;
  std::vector<std::int32_t> block_table, seq_lens;

  RandomTable(Rng& rng) {
    num_seqs = rng.integer(0, 6);
    max_pages = rng.integer(0, 5);
    page_size = rng.integer(1, 17);
    block_table.assign(static_cast<std::size_t>(num_seqs * max_pages), 0);
    for (auto& id : block_table) {
      const std::int32_t garbage[] = {-1, -99, std::numeric_limits<std::int32_t>::max(),
                                      std::numeric_limits<std::int32_t>::min()};
      id = garbage[rng.integer(0, 3)];
    }
    std::int32_t next = 0;
    for (std::int64_t s = 0; s < num_seqs; ++s) {
      const std::int64_t len = rng.integer(0, max_pages * page_size);
      seq_lens.push_back(static_cast<std::int32_t>(len));
      for (std::int64_t j = 0; j * page_size < len; ++j) {
        block_table[static_cast<std::size_t>(s * max_pages + j)] = next++ * 7 % 1000;
      }
    }
  }
  BlockTable view() {
    return {TensorView(block_table.data(), DType::kI32, {num_seqs, max_pages}),
            TensorView(seq_lens.data(), DType::kI32, {num_seqs})};
  }
  std::int64_t used(std::int64_t s) const {
    return (seq_lens[static_cast<std::size_t>(s)] + page_size - 1) / page_size;
  }
};

TEST(PageTable, RandomRoundTrips) {
  Rng rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    RandomTable t(rng);
    const CsrPageTableData csr = to_csr(t.view(), t.page_size);
    ASSERT_EQ(csr.indptr.size(), static_cast<std::size_t>(t.num_seqs + 1));
    ASSERT_EQ(csr.indptr[0], 0);
    for (std::int64_t s = 0; s < t.num_seqs; ++s) {
      const auto us = static_cast<std::size_t>(s);
      ASSERT_EQ(csr.indptr[us + 1] - csr.indptr[us], t.used(s)) << "trial " << trial;
      for (std::int64_t j = 0; j < t.used(s); ++j) {
        EXPECT_EQ(csr.indices[static_cast<std::size_t>(csr.indptr[us] + j)],
                  t.block_table[static_cast<std::size_t>(s * t.max_pages + j)]);
      }
      if (t.used(s) > 0) {
        EXPECT_EQ((t.used(s) - 1) * t.page_size + csr.last_page_len[us], t.seq_lens[us]);
        EXPECT_GE(csr.last_page_len[us], 1);
        EXPECT_LE(csr.last_page_len[us], t.page_size);
      }
    }
    CsrPageTableData csr_copy = csr;
    const BlockTableData back = to_block_table(csr_copy.view(), t.page_size);
    ASSERT_EQ(back.num_seqs, t.num_seqs);
    EXPECT_EQ(back.seq_lens, t.seq_lens) << "trial " << trial;
    for (std::int64_t s = 0; s < t.num_seqs; ++s) {
      for (std::int64_t j = 0; j < back.max_pages; ++j) {
        const std::int32_t id = back.block_table[static_cast<std::size_t>(s * back.max_pages + j)];
        if (j < t.used(s)) EXPECT_EQ(id, t.block_table[static_cast<std::size_t>(s * t.max_pages + j)]);
        else EXPECT_EQ(id, -1) << "unused entries are padded with -1";
      }
    }
    // And back again: CSR -> block -> CSR is the identity.
    BlockTableData back_copy = back;
    const CsrPageTableData again = to_csr(back_copy.view(), t.page_size);
    EXPECT_EQ(again.indptr, csr.indptr);
    EXPECT_EQ(again.indices, csr.indices);
    EXPECT_EQ(again.last_page_len, csr.last_page_len);
  }
}

TEST(PageTable, StridedBlockTableIsReadThroughItsStrides) {
  // A column-major block table [2 seqs, 3 pages]: element (s, j) at j * 2 + s.
  std::vector<std::int32_t> col_major = {10, 20, 11, -1, -1, -1};
  std::vector<std::int32_t> lens = {5, 3};
  const BlockTable t{TensorView(col_major.data(), DType::kI32, {2, 3}, {1, 2}),
                     TensorView(lens.data(), DType::kI32, {2})};
  const CsrPageTableData csr = to_csr(t, 4);
  EXPECT_EQ(csr.indices, (std::vector<std::int32_t>{10, 11, 20}));
  EXPECT_EQ(csr.indptr, (std::vector<std::int32_t>{0, 2, 3}));
  EXPECT_EQ(csr.last_page_len, (std::vector<std::int32_t>{1, 3}));
}

TEST(PageTable, CsrGarbageIsIgnored) {
  // Entries past indptr[num_seqs] and the last_page_len of an empty sequence are never used.
  std::vector<std::int32_t> indptr = {0, 1, 1, 3}, indices = {4, 7, 2, -5, 99999},
                            last = {3, -42, 1};
  CsrPageTable csr{TensorView(indptr.data(), DType::kI32, {4}),
                   TensorView(indices.data(), DType::kI32, {5}),
                   TensorView(last.data(), DType::kI32, {3})};
  const BlockTableData bt = to_block_table(csr, 4);
  EXPECT_EQ(bt.seq_lens, (std::vector<std::int32_t>{3, 0, 5}));
  EXPECT_EQ(bt.max_pages, 2);
  EXPECT_EQ(bt.block_table, (std::vector<std::int32_t>{4, -1, -1, -1, 7, 2}));
  EXPECT_EQ(num_seqs(csr), 3);
}

TEST(PageTable, NumSeqs) {
  std::vector<std::int32_t> bt(6, 0), lens(2, 0);
  EXPECT_EQ(num_seqs(BlockTable{TensorView(bt.data(), DType::kI32, {2, 3}),
                                TensorView(lens.data(), DType::kI32, {2})}),
            2);
  EXPECT_EQ(num_seqs(CsrPageTable{}), 0);
}

TEST(PageTable, ConversionErrorsAreInvalidArgument) {
  std::vector<std::int32_t> bt = {0, 1, 2, -1}, lens = {8, 3};
  const BlockTable t{TensorView(bt.data(), DType::kI32, {2, 2}), TensorView(lens.data(), DType::kI32, {2})};
  for (auto f : {+[](const BlockTable& x) { (void)to_csr(x, 3); },    // 8 tokens in 2 pages of 3
                 +[](const BlockTable& x) { (void)to_csr(x, 0); },    // page size 0
                 +[](const BlockTable& x) { (void)to_csr(x, -4); }}) {
    try {
      f(t);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
}

TEST(PageTable, ToBlockTableRejectsSeqLensPastI32) {
  // 3 pages of 2^30 tokens: seq_lens[0] was written as 2^31 + 1 wrapped to -2147483647.
  std::vector<std::int32_t> indptr = {0, 3}, indices = {0, 1, 2}, last = {1};
  const CsrPageTable csr{TensorView(indptr.data(), DType::kI32, {2}), TensorView(indices.data(), DType::kI32, {3}),
                         TensorView(last.data(), DType::kI32, {1})};
  expect_invalid_argument([&] { (void)to_block_table(csr, std::int64_t{1} << 30); },
               "sequence 0 has 3 pages of 1073741824 tokens and last_page_len[0] = 1");
  expect_invalid_argument([&] { (void)to_block_table(csr, std::numeric_limits<std::int64_t>::max()); }, "sequence 0 has 3 pages");
  // The largest length an i32 holds is still accepted: 2 full pages of 2^30 - 1 and one of 1.
  const BlockTableData bt = to_block_table(csr, (std::int64_t{1} << 30) - 1);
  EXPECT_EQ(bt.seq_lens, (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::max()}));
  // One page needs no multiplication, whatever the page size.
  std::vector<std::int32_t> one = {0, 1};
  const CsrPageTable single{TensorView(one.data(), DType::kI32, {2}), TensorView(indices.data(), DType::kI32, {3}),
                            TensorView(last.data(), DType::kI32, {1})};
  EXPECT_EQ(to_block_table(single, std::numeric_limits<std::int64_t>::max()).seq_lens,
            (std::vector<std::int32_t>{1}));
}

TEST(PageTable, ToCsrTakesAnyPageSize) {
  // len + page_size - 1 overflowed for page_size INT64_MAX: 0 pages and last_page_len 0 for a
  // sequence of 5 tokens.
  std::vector<std::int32_t> bt = {7, -1, 3, -1}, lens = {5, std::numeric_limits<std::int32_t>::max()};
  const BlockTable t{TensorView(bt.data(), DType::kI32, {2, 2}), TensorView(lens.data(), DType::kI32, {2})};
  const CsrPageTableData csr = to_csr(t, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(csr.indptr, (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(csr.indices, (std::vector<std::int32_t>{7, 3}));
  EXPECT_EQ(csr.last_page_len, (std::vector<std::int32_t>{5, std::numeric_limits<std::int32_t>::max()}));
}

TEST(PageTable, ToBlockTableRejectsNegativePageIdsInUse) {
  // to_csr rejected a negative id in a used entry and to_block_table copied it as is.
  std::vector<std::int32_t> indptr = {0, 1, 3}, indices = {4, 1, -7, -9}, last = {2, 3};
  const CsrPageTable csr{TensorView(indptr.data(), DType::kI32, {3}), TensorView(indices.data(), DType::kI32, {4}),
                         TensorView(last.data(), DType::kI32, {2})};
  expect_invalid_argument([&] { (void)to_block_table(csr, 4); }, "indices[2] is -7 but sequence 1 uses that page");
  // Past indptr[num_seqs] the entries are unused and may hold anything.
  indptr[2] = 2;
  const BlockTableData bt = to_block_table(csr, 4);
  EXPECT_EQ(bt.block_table, (std::vector<std::int32_t>{4, 1}));
  // And a negative id first in the list.
  indices[0] = -1;
  expect_invalid_argument([&] { (void)to_block_table(csr, 4); }, "indices[0] is -1 but sequence 0 uses that page");
}

// Ops accept tables that describe nothing: no sequences, and sequences without pages whose
// block table has zero columns (an empty std::vector may hand out a null data pointer).
TEST(PageTable, EmptyTablesAreLegalForOps) {
  Rng rng(5);
  PagedCache cache(CacheSpec{KVLayout::kNHD, DType::kF32, 2, 4, 1, 8}, rng);
  std::vector<float> q(2 * 2 * 8, 1.0f), out(q.size(), 7.0f), lse(4, 7.0f);
  std::vector<std::int32_t> lens = {0, 0};
  const BlockTable empty_rows{TensorView(nullptr, DType::kI32, {2, 0}),
                              TensorView(lens.data(), DType::kI32, {2})};
  decode(Context::cpu(), TensorView(q.data(), DType::kF32, {2, 2, 8}), cache.kv(), empty_rows, {},
         TensorView(out.data(), DType::kF32, {2, 2, 8}), TensorView(lse.data(), DType::kF32, {2, 2}));
  for (float x : out) EXPECT_EQ(x, 0.0f);
  for (float x : lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());

  const BlockTable no_seqs{TensorView(nullptr, DType::kI32, {0, 3}), TensorView(nullptr, DType::kI32, {0})};
  EXPECT_NO_THROW(decode(Context::cpu(), TensorView(nullptr, DType::kF32, {0, 2, 8}), cache.kv(),
                         no_seqs, {}, TensorView(nullptr, DType::kF32, {0, 2, 8})));
}

}  // namespace
}  // namespace pagedattn::testing
