// Attention states: merge_state / merge_states against reference::merge, the algebra of the
// merge (commutative, associative, -inf is the identity), in-place outputs, and the property
// that makes split-K and cascade work: attention over a sequence split in two, merged, equals
// attention over the whole.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "compare.h"
#include "paged_fixture.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"
#include "pagedattn/reference.h"

namespace pagedattn::testing {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr std::int64_t kRows = 5, kHeads = 3, kDim = 64;

// One state (v [rows, heads, dim] of `dtype`, lse f32 [rows, heads]) with its values.
struct State {
  HostTensor v, lse;
  std::vector<double> v_values, lse_values;

  State(Rng& rng, DType dtype, double empty_fraction = 0.0) {
    v = HostTensor::make(dtype, {kRows, kHeads, kDim});
    lse = HostTensor::make(DType::kF32, {kRows, kHeads});
    v_values = v.fill_random(rng, -1.0, 1.0);
    lse_values = lse.fill_random(rng, -3.0, 5.0);
    for (double& l : lse_values) {
      if (rng.uniform(0.0, 1.0) < empty_fraction) l = kNegInf;  // an empty partial attention
    }
    lse.fill(lse_values);
  }
  State(DType dtype) {  // an output, poisoned
    v = HostTensor::make(dtype, {kRows, kHeads, kDim});
    lse = HostTensor::make(DType::kF32, {kRows, kHeads});
  }
};

// An empty state's value is zero whatever its v holds (DESIGN.md §3: empty gives 0, -inf).
void zero_empty(std::vector<double>& v, const std::vector<double>& lse) {
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (lse[i] == kNegInf) std::fill_n(v.begin() + static_cast<std::ptrdiff_t>(i * kDim), kDim, 0.0);
  }
}

// reference::merge over every (row, head).
void reference_merge(std::vector<double>& v, std::vector<double>& lse, const State& b) {
  for (std::int64_t rh = 0; rh < kRows * kHeads; ++rh) {
    const auto i = static_cast<std::size_t>(rh);
    reference::merge(std::span(v).subspan(i * kDim, kDim), lse[i],
                     std::span(b.v_values).subspan(i * kDim, kDim), b.lse_values[i]);
  }
  zero_empty(v, lse);
}

void expect_state(const State& got, const std::vector<double>& v, const std::vector<double>& lse,
                  DType dtype, const char* what) {
  const Comparison cv = compare(read_values(got.v.view), v, tolerance_for(dtype), what);
  EXPECT_TRUE(cv.passed) << cv.message;
  const Comparison cl = compare_lse(read_values(got.lse.view), lse, what);
  EXPECT_TRUE(cl.passed) << cl.message;
}

void merge(const State& a, const State& b, const State& out) {
  merge_state(Context::cpu(), a.v.view, a.lse.view, b.v.view, b.lse.view, out.v.view, out.lse.view);
}

TEST(MergeState, MatchesReferenceForEveryDtype) {
  Rng rng(3);
  for (DType da : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType dout : {DType::kF32, DType::kF16, DType::kBF16}) {
      const State a(rng, da, 0.2), b(rng, DType::kF32, 0.2), out(dout);
      merge(a, b, out);
      std::vector<double> v = a.v_values, lse = a.lse_values;
      reference_merge(v, lse, b);
      expect_state(out, v, lse, dout, "merge_state");
    }
  }
}

TEST(MergeState, EmptyStatesAreTheIdentity) {
  Rng rng(4);
  State a(rng, DType::kF32), empty(rng, DType::kF32), out(DType::kF32);
  empty.lse.fill(std::vector<double>(kRows * kHeads, kNegInf));
  merge(a, empty, out);
  expect_state(out, a.v_values, a.lse_values, DType::kF32, "a (+) empty");
  merge(empty, a, out);
  expect_state(out, a.v_values, a.lse_values, DType::kF32, "empty (+) a");
  // Both empty: zero output, LSE -inf (DESIGN.md §3), not NaN from 0/0.
  merge(empty, empty, out);
  expect_state(out, std::vector<double>(kRows * kHeads * kDim, 0.0),
               std::vector<double>(kRows * kHeads, kNegInf), DType::kF32, "empty (+) empty");
}

TEST(MergeState, CommutativeAndAssociative) {
  Rng rng(5);
  const State a(rng, DType::kF32, 0.1), b(rng, DType::kF32, 0.1), c(rng, DType::kF32, 0.1);
  State ab(DType::kF32), ba(DType::kF32), ab_c(DType::kF32), bc(DType::kF32), a_bc(DType::kF32);
  merge(a, b, ab);
  merge(b, a, ba);
  expect_state(ba, read_values(ab.v.view), read_values(ab.lse.view), DType::kF32, "commutative");
  merge(ab, c, ab_c);
  merge(b, c, bc);
  merge(a, bc, a_bc);
  expect_state(a_bc, read_values(ab_c.v.view), read_values(ab_c.lse.view), DType::kF32, "associative");
}

TEST(MergeState, OutputMayAliasAnInput) {
  Rng rng(6);
  for (bool alias_a : {true, false}) {
    const State a(rng, DType::kF16, 0.1), b(rng, DType::kF16, 0.1);
    std::vector<double> v = a.v_values, lse = a.lse_values;
    reference_merge(v, lse, b);
    const State& target = alias_a ? a : b;
    merge_state(Context::cpu(), a.v.view, a.lse.view, b.v.view, b.lse.view, target.v.view,
                target.lse.view);
    expect_state(target, v, lse, DType::kF16, alias_a ? "out = a" : "out = b");
  }
}

// An Error containing `needle`, and what `snapshot` reads (every buffer the call could
// write) unchanged.
template <class Call, class Snapshot>
void expect_rejected(Call&& call, Snapshot&& snapshot, const std::string& needle) {
  const auto before = snapshot();
  try {
    call();
    ADD_FAILURE() << "accepted; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(snapshot(), before) << needle;
}

// Outputs may alias an input only element for element. One shifted by a row overwrote rows not
// yet read (rows 1 2 3 4 merged with an equal state came out 1 1 1 1), and an lse_out over v_out's
// memory overwrote v_out: every partial overlap is rejected, with nothing written.
TEST(MergeState, RejectsOutputsThatPartlyOverlapAnInputOrEachOther) {
  constexpr std::int64_t R = 4, H = 2, D = 8, kRow = H * D;
  // Two states of equal LSE whose row r holds r + 1, each v and lse with one spare row.
  std::vector<float> a((R + 1) * kRow, 0.0f), b, la((R + 1) * H, 0.0f), lb;
  std::vector<float> out(R * kRow, -1.0f), lo(R * H, -1.0f);
  for (std::int64_t i = 0; i < R * kRow; ++i) a[static_cast<std::size_t>(i)] = static_cast<float>(i / kRow + 1);
  b = a;
  lb = la;
  auto v = [](std::vector<float>& m, std::int64_t first) { return TensorView(m.data() + first, DType::kF32, {R, H, D}); };
  auto l = [](std::vector<float>& m, std::int64_t first) { return TensorView(m.data() + first, DType::kF32, {R, H}); };
  auto snapshot = [&] {
    std::vector<float> all;
    for (const auto* m : {&a, &b, &la, &lb, &out, &lo}) all.insert(all.end(), m->begin(), m->end());
    return all;
  };
  auto check = [&](const TensorView& lse_b, const TensorView& v_out, const TensorView& lse_out,
                   const std::string& needle) {
    auto call = [&] { merge_state(Context::cpu(), v(a, 0), l(la, 0), v(b, 0), lse_b, v_out, lse_out); };
    expect_rejected(call, snapshot, needle);
  };
  check(l(lb, 0), v(a, kRow), l(lo, 0), "v_out overlaps v_a");  // one row on
  check(l(lb, 0), v(b, 1), l(lo, 0), "v_out overlaps v_b");     // one element on
  check(l(lb, 0), v(out, 0), l(la, 1), "lse_out overlaps lse_a");
  check(l(lb, 0), v(out, 0), l(lb, H), "lse_out overlaps lse_b");
  check(l(lb, 0), v(out, 0), l(a, kRow), "lse_out overlaps v_a");
  check(l(out, 3), v(out, 0), l(lo, 0), "v_out overlaps lse_b");
  check(l(lb, 0), v(out, 0), l(out, 0), "lse_out overlaps v_out");  // lse_out inside v_out
  // Broadcast outputs (row stride 0): every row's result would land on row 0, racing.
  check(l(lb, 0), TensorView(out.data(), DType::kF32, {R, H, D}, {0, D, 1}), l(lo, 0),
        "v_out addresses some elements twice");
  check(l(lb, 0), v(out, 0), TensorView(lo.data(), DType::kF32, {R, H}, {0, 1}), "lse_out addresses some elements twice");
  // The same buffers merge when outputs meet inputs element for element, or not at all.
  merge_state(Context::cpu(), v(a, 0), l(la, 0), v(b, 0), l(lb, 0), v(out, 0), l(lo, 0));
  merge_state(Context::cpu(), v(a, 0), l(la, 0), v(b, 0), l(lb, 0), v(a, 0), l(la, 0));
  for (std::int64_t i = 0; i < R * kRow; ++i) {
    const auto e = static_cast<std::size_t>(i);
    ASSERT_EQ(out[e], static_cast<float>(i / kRow + 1)) << i;
    ASSERT_EQ(a[e], out[e]) << i;
  }
  EXPECT_NEAR(la[0], std::log(2.0), 1e-6);
}

// Views that interleave without sharing an element are not an overlap: v_a, v_b and v_out as
// slots 0, 1 and 2 of one [rows, 3, heads, dim] buffer.
TEST(MergeState, AcceptsInterleavedOutputsThatShareNoElement) {
  Rng rng(9);
  const State a(rng, DType::kF32, 0.1), b(rng, DType::kF32, 0.1);
  HostTensor packed = HostTensor::make(DType::kF32, {kRows, 3, kHeads, kDim});
  HostTensor packed_lse = HostTensor::make(DType::kF32, {kRows, 3, kHeads});
  const TensorView v = packed.view, lse = packed_lse.view;
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t h = 0; h < kHeads; ++h) {
      const auto rh = static_cast<std::size_t>(r * kHeads + h);
      for (std::int64_t d = 0; d < kDim; ++d) {
        const auto i = rh * kDim + static_cast<std::size_t>(d);
        *static_cast<float*>(v.element_ptr({r, 0, h, d})) = static_cast<float>(a.v_values[i]);
        *static_cast<float*>(v.element_ptr({r, 1, h, d})) = static_cast<float>(b.v_values[i]);
      }
      *static_cast<float*>(lse.element_ptr({r, 0, h})) = static_cast<float>(a.lse_values[rh]);
      *static_cast<float*>(lse.element_ptr({r, 1, h})) = static_cast<float>(b.lse_values[rh]);
    }
  }
  merge_state(Context::cpu(), v.select(1, 0), lse.select(1, 0), v.select(1, 1), lse.select(1, 1), v.select(1, 2),
              lse.select(1, 2));
  std::vector<double> ref_v = a.v_values, ref_lse = a.lse_values;
  reference_merge(ref_v, ref_lse, b);
  const Comparison cv = compare(read_values(v.select(1, 2)), ref_v, tolerance_for(DType::kF32), "interleaved");
  EXPECT_TRUE(cv.passed) << cv.message;
  const Comparison cl = compare_lse(read_values(lse.select(1, 2)), ref_lse, "interleaved");
  EXPECT_TRUE(cl.passed) << cl.message;
}

// merge_states: the outputs may be one state of the inputs (here state 1 of a [rows, states,
// heads, dim] buffer, whose rows interleave with the other states'), but not overlap a state
// partly.
TEST(MergeStates, OutputsMayBeOneStateButNotOverlapOnePartly) {
  Rng rng(10);
  constexpr std::int64_t S = 3;
  HostTensor v = HostTensor::make(DType::kF32, {kRows, S, kHeads, kDim});
  HostTensor lse = HostTensor::make(DType::kF32, {kRows, S, kHeads});
  v.fill_random(rng, -1.0, 1.0);
  lse.fill_random(rng, -3.0, 5.0);
  State separate(DType::kF32);
  merge_states(Context::cpu(), v.view, lse.view, separate.v.view, separate.lse.view);
  // One element on from state 0 (overlapping state 0 partly), lse one element on, lse_out
  // over v's first elements.
  const TensorView shifted(static_cast<float*>(v.view.data()) + 1, DType::kF32, {kRows, kHeads, kDim},
                           {v.view.stride(0), v.view.stride(2), 1});
  const TensorView lse_shifted(static_cast<float*>(lse.view.data()) + 1, DType::kF32, {kRows, kHeads},
                               {lse.view.stride(0), lse.view.stride(2)});
  const TensorView lse_over_v(v.view.data(), DType::kF32, {kRows, kHeads});
  auto snapshot = [&] { return std::pair{read_values(v.view), read_values(lse.view)}; };
  for (const auto& [out, lse_out, needle] : {std::tuple{shifted, lse.view.select(1, 0), "v_out overlaps v"},
                                             std::tuple{separate.v.view, lse_shifted, "lse_out overlaps lse"},
                                             std::tuple{separate.v.view, lse_over_v, "lse_out overlaps v"}}) {
    expect_rejected([&] { merge_states(Context::cpu(), v.view, lse.view, out, lse_out); }, snapshot, needle);
  }
  merge_states(Context::cpu(), v.view, lse.view, v.view.select(1, 1), lse.view.select(1, 1));
  expect_state(separate, read_values(v.view.select(1, 1)), read_values(lse.view.select(1, 1)), DType::kF32,
               "out = state 1");
}

TEST(MergeStates, EqualsRepeatedMergeState) {
  Rng rng(7);
  for (std::int64_t num_states : {1, 2, 5}) {
    std::vector<State> states;
    for (std::int64_t i = 0; i < num_states; ++i) states.emplace_back(rng, DType::kF32, 0.15);
    // Pack them as v [rows, num_states, heads, dim], lse [rows, num_states, heads].
    HostTensor v = HostTensor::make(DType::kF32, {kRows, num_states, kHeads, kDim});
    HostTensor lse = HostTensor::make(DType::kF32, {kRows, num_states, kHeads});
    std::vector<double> v_packed, lse_packed;
    for (std::int64_t r = 0; r < kRows; ++r) {
      for (const State& s : states) {
        const auto row = static_cast<std::size_t>(r);
        v_packed.insert(v_packed.end(), s.v_values.begin() + row * kHeads * kDim,
                        s.v_values.begin() + (row + 1) * kHeads * kDim);
        lse_packed.insert(lse_packed.end(), s.lse_values.begin() + row * kHeads,
                          s.lse_values.begin() + (row + 1) * kHeads);
      }
    }
    v.fill(v_packed);
    lse.fill(lse_packed);
    State out(DType::kF32);
    merge_states(Context::cpu(), v.view, lse.view, out.v.view, out.lse.view);

    std::vector<double> ref_v = states[0].v_values, ref_lse = states[0].lse_values;
    zero_empty(ref_v, ref_lse);
    State chained(DType::kF32);
    chained.v.fill(ref_v);
    chained.lse.fill(ref_lse);
    for (std::size_t i = 1; i < states.size(); ++i) {
      reference_merge(ref_v, ref_lse, states[i]);
      merge(chained, states[i], chained);
    }
    expect_state(out, ref_v, ref_lse, DType::kF32, "merge_states vs reference");
    expect_state(out, read_values(chained.v.view), read_values(chained.lse.view), DType::kF32,
                 "merge_states vs repeated merge_state");
  }
}

// Decode over the first pages and over the rest, each with its LSE, merged == decode of the
// whole sequence (and the dense oracle). This is the split-K and cascade identity.
TEST(MergeState, DecodeOfTwoHalvesMergesToTheWhole) {
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit}) {
    Rng rng(8);
    constexpr std::int64_t kPageSize = 8, kQHeads = 6, kKVHeads = 2, D = 64;
    const std::vector<std::int64_t> first = {16, 8, 0, 24}, second = {13, 1, 5, 0};
    PagedCache cache(CacheSpec{layout, DType::kBF16, 24, kPageSize, kKVHeads, D}, rng);
    std::vector<std::vector<std::int32_t>> rows_a, rows_b, rows_all;
    std::vector<std::int64_t> lens_all;
    std::vector<DenseKV> dense;
    for (std::size_t s = 0; s < first.size(); ++s) {
      rows_a.push_back(cache.take_pages(first[s] / kPageSize));
      rows_b.push_back(cache.take_pages((second[s] + kPageSize - 1) / kPageSize));
      const DenseKV a = cache.random_tokens(first[s], rng), b = cache.random_tokens(second[s], rng);
      cache.write(rows_a.back(), a);
      cache.write(rows_b.back(), b);
      rows_all.push_back(rows_a.back());
      rows_all.back().insert(rows_all.back().end(), rows_b.back().begin(), rows_b.back().end());
      lens_all.push_back(first[s] + second[s]);
      dense.push_back(DenseKV::concat(a, b));
    }
    HostTable ta(rows_a, first, kPageSize, TableFormat::kBlockTable, rng);
    HostTable tb(rows_b, second, kPageSize, TableFormat::kCsr, rng);
    HostTable tall(rows_all, lens_all, kPageSize, TableFormat::kBlockTable, rng);
    const auto S = static_cast<std::int64_t>(first.size());
    HostTensor q = HostTensor::make(DType::kBF16, {S, kQHeads, D});
    const std::vector<double> qv = q.fill_random(rng, -4.0, 4.0);
    auto state = [&] {
      return std::pair{HostTensor::make(DType::kF32, {S, kQHeads, D}), HostTensor::make(DType::kF32, {S, kQHeads})};
    };
    auto [va, la] = state();
    auto [vb, lb] = state();
    auto [vall, lall] = state();
    auto [vm, lm] = state();
    decode(Context::cpu(), q.view, cache.kv(), ta.view(), {}, va.view, la.view);
    decode(Context::cpu(), q.view, cache.kv(), tb.view(), {}, vb.view, lb.view);
    decode(Context::cpu(), q.view, cache.kv(), tall.view(), {}, vall.view, lall.view);
    merge_state(Context::cpu(), va.view, la.view, vb.view, lb.view, vm.view, lm.view);

    const Tolerance tol = tolerance_for(DType::kF32);
    Comparison c = compare(read_values(vm.view), read_values(vall.view), tol, "merged vs whole");
    EXPECT_TRUE(c.passed) << to_string(layout) << ": " << c.message;
    c = compare_lse(read_values(lm.view), read_values(lall.view));
    EXPECT_TRUE(c.passed) << to_string(layout) << ": " << c.message;

    ReferenceParams ref;
    ref.scale = 1.0f / std::sqrt(static_cast<float>(D));
    std::vector<double> out(static_cast<std::size_t>(S * kQHeads * D)), lse(static_cast<std::size_t>(S * kQHeads));
    for (std::int64_t s = 0; s < S; ++s) {
      const auto q0 = static_cast<std::size_t>(s * kQHeads * D);
      reference_sequence(std::span(qv).subspan(q0, kQHeads * D), 1, dense[static_cast<std::size_t>(s)],
                         kQHeads, kKVHeads, D, ref, std::span(out).subspan(q0, kQHeads * D),
                         std::span(lse).subspan(static_cast<std::size_t>(s * kQHeads), kQHeads));
    }
    c = compare(read_values(vm.view), out, tol, "merged vs oracle");
    EXPECT_TRUE(c.passed) << to_string(layout) << ": " << c.message;
  }
}

}  // namespace
}  // namespace pagedattn::testing
