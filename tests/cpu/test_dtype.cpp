// The scalar conversions of dtype.h, checked exhaustively: every bit pattern of f16, bf16 and
// both fp8 formats decodes and re-encodes to itself (finite values), every tie between two
// neighbouring values rounds to the even one, fp8 saturates at its largest finite value, and
// NaN stays NaN.
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "pagedattn/dtype.h"
#include "pagedattn/error.h"

namespace pagedattn {
namespace {

struct Format {
  const char* name;
  int bits;
  std::function<float(std::uint32_t)> decode;
  std::function<std::uint32_t(float)> encode;
  float max_finite;
};

const Format kFormats[] = {
    {"f16", 16, [](std::uint32_t b) { return f16_to_float(static_cast<std::uint16_t>(b)); },
     [](float f) { return std::uint32_t{float_to_f16(f)}; }, 65504.0f},
    {"bf16", 16, [](std::uint32_t b) { return bf16_to_float(static_cast<std::uint16_t>(b)); },
     [](float f) { return std::uint32_t{float_to_bf16(f)}; }, 0x1.fep127f},
    {"fp8_e4m3", 8, [](std::uint32_t b) { return fp8_e4m3_to_float(static_cast<std::uint8_t>(b)); },
     [](float f) { return std::uint32_t{float_to_fp8_e4m3(f)}; }, 448.0f},
    {"fp8_e5m2", 8, [](std::uint32_t b) { return fp8_e5m2_to_float(static_cast<std::uint8_t>(b)); },
     [](float f) { return std::uint32_t{float_to_fp8_e5m2(f)}; }, 57344.0f},
};

void PrintTo(const Format& f, std::ostream* os) { *os << f.name; }

class Conversions : public ::testing::TestWithParam<Format> {};

TEST_P(Conversions, EveryFinitePatternRoundTrips) {
  const Format& f = GetParam();
  int finite = 0;
  for (std::uint32_t b = 0; b < (1u << f.bits); ++b) {
    const float x = f.decode(b);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(f.decode(f.encode(x)))) << f.name << " NaN pattern " << b;
      continue;
    }
    if (std::isinf(x)) continue;  // checked by the overflow tests
    ++finite;
    ASSERT_EQ(f.encode(x), b) << f.name << " pattern 0x" << std::hex << b << " = " << x;
  }
  // Every pattern but the NaNs (and infinities) is a distinct finite value.
  EXPECT_GT(finite, (1 << f.bits) - (1 << (f.bits - 4)));
}

// For each pair of neighbouring positive finite values, the midpoint rounds to the even
// pattern and anything off the midpoint rounds to the nearer neighbour.
TEST_P(Conversions, TiesRoundToEven) {
  const Format& f = GetParam();
  const std::uint32_t sign = 1u << (f.bits - 1);
  for (std::uint32_t b = 0; b + 1 < sign; ++b) {
    const float lo = f.decode(b), hi = f.decode(b + 1);
    if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
    const float mid = lo + (hi - lo) / 2;  // exact: the formats have far fewer bits than float
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
    const std::uint32_t even = (b % 2 == 0) ? b : b + 1;
    EXPECT_EQ(f.encode(mid), even) << f.name << " tie between 0x" << std::hex << b << " and 0x" << b + 1;
    EXPECT_EQ(f.encode(-mid), even | sign) << f.name << " negative tie at 0x" << std::hex << b;
    EXPECT_EQ(f.encode(std::nextafter(mid, 0.0f)), b) << f.name << " below tie at 0x" << std::hex << b;
    EXPECT_EQ(f.encode(std::nextafter(mid, hi)), b + 1) << f.name << " above tie at 0x" << std::hex << b;
  }
}

TEST_P(Conversions, SignedZeroKeepsItsSign) {
  const Format& f = GetParam();
  EXPECT_EQ(f.encode(0.0f), 0u);
  EXPECT_EQ(f.encode(-0.0f), 1u << (f.bits - 1));
  EXPECT_TRUE(std::signbit(f.decode(1u << (f.bits - 1))));
}

TEST_P(Conversions, NaNStaysNaN) {
  const Format& f = GetParam();
  for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    std::bit_cast<float>(0x7f800001u)}) {  // a signalling NaN too
    EXPECT_TRUE(std::isnan(f.decode(f.encode(nan)))) << f.name;
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, Conversions, ::testing::ValuesIn(kFormats),
                         [](const ::testing::TestParamInfo<Format>& info) {
                           return std::string(info.param.name);
                         });

// fp8 caches clip: anything at or beyond the largest finite value, infinities included,
// becomes that value (e4m3 has no infinity; e5m2's would poison a whole attention row).
TEST(Fp8, SaturatesAtMaxFinite) {
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(float_to_fp8_e4m3(x), 0x7e) << x;
    EXPECT_EQ(float_to_fp8_e4m3(-x), 0xfe) << x;
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  for (float x : {57344.0f, 61440.0f, 65536.0f, 1e9f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(float_to_fp8_e5m2(x), 0x7b) << x;
    EXPECT_EQ(float_to_fp8_e5m2(-x), 0xfb) << x;
  }
  EXPECT_EQ(fp8_e5m2_to_float(0x7b), 57344.0f);
  // Just below the max, ordinary rounding applies.
  EXPECT_EQ(float_to_fp8_e4m3(440.0f), 0x7e);  // between 416 and 448: nearer 448
  EXPECT_EQ(float_to_fp8_e4m3(420.0f), 0x7d);  // nearer 416
}

TEST(Fp8, E4M3HasNoInfinity) {
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xff)));
  for (std::uint32_t b = 0; b < 256; ++b) EXPECT_FALSE(std::isinf(fp8_e4m3_to_float(static_cast<std::uint8_t>(b))));
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
}

TEST(Fp8, E5M2IsTheUpperByteOfF16) {
  for (std::uint32_t b = 0; b < 256; ++b) {
    const float x = fp8_e5m2_to_float(static_cast<std::uint8_t>(b));
    const float h = f16_to_float(static_cast<std::uint16_t>(b << 8));
    if (std::isnan(h)) EXPECT_TRUE(std::isnan(x));
    else EXPECT_EQ(x, h) << b;
  }
}

// IEEE halves overflow to infinity (round to nearest: from 65520 on), keep infinities.
TEST(F16, OverflowAndInfinity) {
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65519.996f), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(float_to_f16(0x1.0p-25f), 0x0000);        // half the smallest subnormal: tie to even
  EXPECT_EQ(float_to_f16(0x1.8p-25f), 0x0001);        // above the tie
  EXPECT_EQ(float_to_f16(0x1.ffcp-15f), 0x0400);      // rounds up into the normals
}

TEST(BF16, OverflowAndInfinity) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // above max + half ulp
  EXPECT_EQ(float_to_bf16(0x1.fep127f), 0x7f7f);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
}

// The generic load/store dispatch agrees with the per-format functions.
TEST(DTypeDispatch, LoadStoreMatchScalarFunctions) {
  for (float x : {0.3f, -1.7f, 100.25f, 1e-5f, -3e4f}) {
    std::uint16_t h = 0;
    store_from_float(&h, DType::kF16, 0, x);
    EXPECT_EQ(h, float_to_f16(x));
    EXPECT_EQ(load_as_float(&h, DType::kF16, 0), f16_to_float(h));
    store_from_float(&h, DType::kBF16, 0, x);
    EXPECT_EQ(h, float_to_bf16(x));
    EXPECT_EQ(load_as_float(&h, DType::kBF16, 0), bf16_to_float(h));
    std::uint8_t b = 0;
    store_from_float(&b, DType::kF8E4M3, 0, x);
    EXPECT_EQ(b, float_to_fp8_e4m3(x));
    store_from_float(&b, DType::kF8E5M2, 0, x);
    EXPECT_EQ(b, float_to_fp8_e5m2(x));
    float f = 0;
    store_from_float(&f, DType::kF32, 0, x);
    EXPECT_EQ(load_as_float(&f, DType::kF32, 0), x);
  }
}

TEST(DTypeNames, ParseIsTheInverseOfToString) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2,
                  DType::kI32, DType::kI64}) {
    EXPECT_EQ(parse_dtype(to_string(t)), t);
  }
  try {
    (void)parse_dtype("f8");
    ADD_FAILURE() << "parse_dtype accepted \"f8\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("f8"), std::string::npos);
  }
}

}  // namespace
}  // namespace pagedattn
