// Every fp8 code through the CPU decode: V rows that hold all 256 codes of the cache's format
// (both zeros, every subnormal, the largest finite) and a NaN code in a dim of its own, against
// the double reference on the values the codes decode to. Random data rarely reaches the
// subnormals and never the NaN codes, which the decode's fast paths widen by bit manipulation.
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

class Fp8Codes : public ::testing::TestWithParam<KVLayout> {};

TEST_P(Fp8Codes, EveryCodeOfVReachesTheOutput) {
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    Rng rng(11);
    PagedCache cache(CacheSpec{GetParam(), dtype, kTokens / kPageSize + 2, kPageSize, kKvHeads, kDim, false, true}, rng);
    DenseKV kv = cache.random_tokens(kTokens, rng);
    // V code of (token t, head h, dim d): every code once per dim over the tokens. Codes that are
    // not finite (e4m3: 0x7f, 0xff; e5m2: infinities and NaNs) become the smallest subnormal,
    // except in dim 0 of head 0, whose token 5 holds a NaN: that dim of the head's query heads
    // must come out NaN and every other dim finite.
    const std::uint8_t nan_code = dtype == DType::kF8E4M3 ? 0x7f : 0x7e;
    for (std::int64_t t = 0; t < kTokens; ++t) {
      for (std::int64_t h = 0; h < kKvHeads; ++h) {
        for (std::int64_t d = 0; d < kDim; ++d) {
          auto code = static_cast<std::uint8_t>((t + 3 * d + 5 * h) % 256);
          if (!std::isfinite(decode_code(dtype, code))) code = 0x01;
          if (t == 5 && h == 0 && d == 0) code = nan_code;
          kv.v[static_cast<std::size_t>((t * kKvHeads + h) * kDim + d)] = decode_code(dtype, code) * cache.scale(true, h);
        }
      }
    }
    const std::vector<std::int32_t> pages = cache.take_pages(kTokens / kPageSize);
    cache.write(pages, kv);
    HostTable table({pages}, {kTokens}, kPageSize, TableFormat::kBlockTable, rng);

    HostTensor q = HostTensor::make(DType::kF32, {1, kQHeads, kDim});
    const std::vector<double> qv = q.fill_random(rng, -1.0, 1.0);
    AttentionParams params;
    params.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
    ReferenceParams ref;
    ref.scale = params.scale;
    std::vector<double> expected(static_cast<std::size_t>(kQHeads * kDim)), expected_lse(kQHeads);
    reference_sequence(qv, 1, kv, kQHeads, kKvHeads, kDim, ref, expected, expected_lse);
    ASSERT_TRUE(std::isnan(expected[0]) && std::isfinite(expected[1])) << "the reference should see the NaN code";

    HostTensor out = HostTensor::make(DType::kF32, {1, kQHeads, kDim});
    decode(Context::cpu(), q.view, cache.kv(), table.view(), params, out.view);
    const Comparison c = compare(read_values(out.view), expected, tolerance_for(DType::kF32), "decode out");
    EXPECT_TRUE(c.passed) << to_string(dtype) << ": " << c.message;
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, Fp8Codes, ::testing::Values(KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit),
                         [](const ::testing::TestParamInfo<KVLayout>& info) {
                           return std::string(to_string(info.param));
                         });

}  // namespace
}  // namespace pagedattn::testing
