// Every case of the standard table: the library (fast implementation, and the reference
// implementation on a subset) against the dense double-precision oracle over the values the
// paged cache actually stores. PAGEDATTN_QUICK_TESTS=1 selects the quick table (sanitizer builds);
// PAGEDATTN_TEST_SIMD_TARGET runs it on a lower SIMD target (testing/simd_target.h).
#include <cctype>
#include <cstdlib>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "paged_fixture.h"
#include "pagedattn/context.h"
#include "pagedattn/system_info.h"
#include "simd_target.h"

namespace pagedattn::testing {

// Failure output names the case rather than dumping its bytes.
void PrintTo(const AttentionCase& c, std::ostream* os) { *os << describe(c); }

namespace {

// Applied before any test dispatches a kernel.
[[maybe_unused]] const SimdTargetRequest& kSimdTarget = simd_target_request();

bool quick_tests() {
  const char* env = std::getenv("PAGEDATTN_QUICK_TESTS");
  return env != nullptr && std::string(env) == "1";
}

// Tests are registered over the full table in both modes, so that their names (discovered at
// build time by CTest) do not depend on the environment; the quick mode skips the cases that
// are not in the quick table. A case's seed identifies it in both tables.
const std::vector<AttentionCase>& cases() {
  static const std::vector<AttentionCase> all = standard_cases(false);
  return all;
}

bool selected(const AttentionCase& c) {
  static const std::set<std::uint64_t> quick = [] {
    std::set<std::uint64_t> seeds;
    for (const AttentionCase& q : standard_cases(true)) seeds.insert(q.seed);
    return seeds;
  }();
  return !quick_tests() || quick.contains(c.seed);
}

// The reference implementation is slow and the same for every dtype pairing of its gather:
// every fifth case of the table is plenty to show it agrees with the independent oracle.
std::vector<AttentionCase> reference_subset() {
  std::vector<AttentionCase> out;
  for (std::size_t i = 0; i < cases().size(); i += 5) out.push_back(cases()[i]);
  return out;
}

// GoogleTest names allow only [A-Za-z0-9_]; the index keeps them unique.
std::string case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  std::string name = "c";  // built by appending: GCC 12 misreports operator+ here (-Wrestrict)
  name += std::to_string(info.index);
  name += '_';
  bool underscore = true;
  for (char ch : describe(info.param)) {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      name += ch;
      underscore = false;
    } else if (!underscore) {
      name += '_';
      underscore = true;
    }
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name;
}

class FastVsOracle : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(FastVsOracle, MatchesDenseReference) {
  if (!selected(GetParam())) GTEST_SKIP() << "not in the quick table";
  if (!simd_target_request().available) GTEST_SKIP() << simd_target_request().name << " is not available here";
  const CaseResult r = run_case(GetParam(), Context::cpu());
  EXPECT_TRUE(r.passed) << describe(GetParam()) << "\n  " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Standard, FastVsOracle, ::testing::ValuesIn(cases()), case_name);

class ReferenceVsOracle : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(ReferenceVsOracle, MatchesDenseReference) {
  if (!selected(GetParam())) GTEST_SKIP() << "not in the quick table";
  Context ctx = Context::cpu();
  ctx.implementation = Implementation::kReference;
  const CaseResult r = run_case(GetParam(), ctx);
  EXPECT_TRUE(r.passed) << describe(GetParam()) << "\n  " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Standard, ReferenceVsOracle, ::testing::ValuesIn(reference_subset()),
                         case_name);

// A requested target must be the one the kernels run on, or the runs above test nothing new.
TEST(AttentionCases, RunOnTheRequestedSimdTarget) {
  const SimdTargetRequest& r = simd_target_request();
  if (r.name.empty()) GTEST_SKIP() << "no PAGEDATTN_TEST_SIMD_TARGET";
  if (!r.available) GTEST_SKIP() << r.name << " is not compiled in or not supported by this CPU";
  EXPECT_EQ(cpu_simd_target(), r.name);
}

// Determinism (DESIGN.md §3): the same inputs give bit-identical outputs, here with different
// thread counts too, since a kernel's split of the work must not change its arithmetic.
TEST(AttentionCases, BitIdenticalRunToRun) {
  int checked = 0;
  for (std::size_t i = 0; i < cases().size(); i += 7) {
    const AttentionCase& c = cases()[i];
    if (!selected(c)) continue;
    CaseFixture a(c), b(c);
    a.run(Context::cpu());
    b.run(Context::cpu());
    EXPECT_EQ(a.result_bytes(), b.result_bytes()) << describe(c);
    ++checked;
  }
  EXPECT_GT(checked, 3);
}

// The table's promises (the quick one's too): every op, layout, dtype, page size, head dim
// and group size appears.
TEST(AttentionCases, TableCoversEveryAxis) {
  std::set<int> ops, layouts, kv_types, q_types, formats;
  std::set<std::int64_t> page_sizes, head_dims, groups;
  bool stacked = false, strided = false, per_head = false, zero_len = false, noncausal = false;
  for (const AttentionCase& c : standard_cases(quick_tests())) {
    ops.insert(static_cast<int>(c.op));
    layouts.insert(static_cast<int>(c.layout));
    kv_types.insert(static_cast<int>(c.kv_dtype));
    q_types.insert(static_cast<int>(c.q_dtype));
    formats.insert(static_cast<int>(c.table));
    page_sizes.insert(c.page_size);
    head_dims.insert(c.head_dim);
    groups.insert(c.num_q_heads / c.num_kv_heads);
    stacked |= c.stacked_kv;
    strided |= c.strided_q;
    per_head |= c.per_head_scales;
    noncausal |= c.op == Op::kPrefill && !c.causal;
    for (std::int64_t len : c.kv_lens) zero_len |= len == 0;
  }
  EXPECT_EQ(ops.size(), 4u);
  EXPECT_EQ(layouts.size(), 3u);
  EXPECT_EQ(kv_types.size(), 5u);
  EXPECT_EQ(q_types.size(), 3u);
  EXPECT_EQ(formats.size(), 2u);
  for (std::int64_t ps : {1, 3, 16, 32, 128}) EXPECT_TRUE(page_sizes.contains(ps)) << ps;
  for (std::int64_t d : {64, 80, 128, 256}) EXPECT_TRUE(head_dims.contains(d)) << d;
  for (std::int64_t g : {1, 2, 4, 5, 8}) EXPECT_TRUE(groups.contains(g)) << g;
  EXPECT_TRUE(stacked && strided && per_head && zero_len && noncausal);
}

}  // namespace
}  // namespace pagedattn::testing
