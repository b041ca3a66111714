// Every fp8 code through the CPU decode and prefill: V rows that hold all 256 codes of the cache's
// format (both zeros, every subnormal, the largest finite) and a NaN code in a dim of its own,
// against the double reference on the values the codes decode to. Random data rarely reaches
// the subnormals and never the NaN codes, which the fast paths widen by bit manipulation.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compare.h"
#include "paged_fixture.h"
#include "pagedattn/dtype.h"
#include "pagedattn/ops.h"

namespace pagedattn::testing {
namespace {

constexpr std::int64_t kTokens = 256, kPageSize = 16, kKvHeads = 2, kQHeads = 8, kDim = 128;

double decode_code(DType dtype, std::uint8_t code) {
  return dtype == DType::kF8E4M3 ? fp8_e4m3_to_float(code) : fp8_e5m2_to_float(code);
}

// A cache of kTokens tokens whose V rows hold every code of `dtype` (see the file comment), and
// the dense values it stores.
struct CodesCache {
  Rng rng{11};
  PagedCache cache;
  DenseKV kv;
  std::vector<std::int32_t> pages;

  CodesCache(KVLayout layout, DType dtype)
      : cache(CacheSpec{layout, dtype, kTokens / kPageSize + 2, kPageSize, kKvHeads, kDim, false, true}, rng) {
    kv = cache.random_tokens(kTokens, rng);
    // V code of (token t, head h, dim d): every magnitude twice per dim over the tokens, with the
    // sign of the dim's parity (one sign per dim: no cancellation, which the bf16 products' bf16
    // weights would amplify past their tolerance). Codes that are not finite (e4m3: 0x7f, 0xff;
    // e5m2: infinities and NaNs) become the smallest subnormal, except in dim 0 of head 0, whose
    // token 5 holds a NaN: that dim of the head's query heads must come out NaN and every other
    // dim finite.
    const std::uint8_t nan_code = dtype == DType::kF8E4M3 ? 0x7f : 0x7e;
    for (std::int64_t t = 0; t < kTokens; ++t) {
      for (std::int64_t h = 0; h < kKvHeads; ++h) {
        for (std::int64_t d = 0; d < kDim; ++d) {
          auto code = static_cast<std::uint8_t>((t + 3 * d + 5 * h) % 128 | (d % 2) << 7);
          if (!std::isfinite(decode_code(dtype, code))) code = 0x01;
          if (t == 5 && h == 0 && d == 0) code = nan_code;
          kv.v[static_cast<std::size_t>((t * kKvHeads + h) * kDim + d)] = decode_code(dtype, code) * cache.scale(true, h);
        }
      }
    }
    pages = cache.take_pages(kTokens / kPageSize);
    cache.write(pages, kv);
  }
};

// q [n_q, kQHeads, kDim] of q_dtype at the last n_q positions: runs `op` (decode or prefill) and
// compares its f32 output with the reference.
template <class Op>
void check_codes(KVLayout layout, DType dtype, DType q_dtype, std::int64_t n_q, Op op) {
  CodesCache c(layout, dtype);
  HostTable table({c.pages}, {kTokens}, kPageSize, TableFormat::kBlockTable, c.rng);
  HostTensor q = HostTensor::make(q_dtype, {n_q, kQHeads, kDim});
  const std::vector<double> qv = q.fill_random(c.rng, -1.0, 1.0);
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  ReferenceParams ref;
  ref.scale = params.scale;
  std::vector<double> expected(static_cast<std::size_t>(n_q * kQHeads * kDim)), expected_lse(static_cast<std::size_t>(n_q * kQHeads));
  reference_sequence(qv, n_q, c.kv, kQHeads, kKvHeads, kDim, ref, expected, expected_lse);
  ASSERT_TRUE(std::isnan(expected[0]) && std::isfinite(expected[1])) << "the reference should see the NaN code";

  HostTensor out = HostTensor::make(DType::kF32, {n_q, kQHeads, kDim});
  op(q.view, c.cache.kv(), table.view(), params, out.view);
  // bf16 q takes the bf16 products, which round the weights to bf16: a bf16 output's tolerance.
  const Comparison cmp = compare(read_values(out.view), expected, tolerance_for(q_dtype), "out");
  EXPECT_TRUE(cmp.passed) << to_string(dtype) << ": " << cmp.message;
}

class Fp8Codes : public ::testing::TestWithParam<KVLayout> {};

TEST_P(Fp8Codes, EveryCodeOfVReachesTheDecodeOutput) {
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    check_codes(GetParam(), dtype, DType::kF32, 1,
                [](const TensorView& q, const PagedKV& kv, const PageTable& table, const AttentionParams& params,
                   const TensorView& out) { decode(Context::cpu(), q, kv, table, params, out); });
  }
}

// bf16 q: the prefill takes the bf16 products, on the fp8 rows converted to bf16.
TEST_P(Fp8Codes, EveryCodeOfVReachesThePrefillOutput) {
  constexpr std::int64_t kQueries = 5;
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    check_codes(GetParam(), dtype, DType::kBF16, kQueries,
                [](const TensorView& q, const PagedKV& kv, const PageTable& table, const AttentionParams& params,
                   const TensorView& out) {
                  std::vector<std::int32_t> indptr{0, kQueries};
                  const TensorView qo_indptr(indptr.data(), DType::kI32, {2});
                  prefill(Context::cpu(), q, qo_indptr, kv, table, params, out);
                });
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, Fp8Codes, ::testing::Values(KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit),
                         [](const ::testing::TestParamInfo<KVLayout>& info) {
                           return std::string(to_string(info.param));
                         });

}  // namespace
}  // namespace pagedattn::testing
