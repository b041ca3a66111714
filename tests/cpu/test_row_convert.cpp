// The vector row conversions of src/cpu/row_convert.h (q rows in, output rows out, cache writes,
// state merges) against the scalar conversions of dtype.h, element by element and bit for bit,
// on every SIMD target this build has and this CPU runs: random values, round-to-even ties,
// values that round up to the next binade or to infinity, subnormals, zeros of both signs,
// infinities and NaNs, and row lengths with and without a tail after the last whole vector.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include "cpu/row_convert.h"
#include "pagedattn/dtype.h"

namespace pagedattn::cpu {
namespace {

constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2};

std::vector<float> special_and_random_values(std::int64_t n) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7f800001u),  // signalling NaN
                          std::bit_cast<float>(0x3f808000u),  // bf16 tie, rounds down to even
                          std::bit_cast<float>(0x3f818000u),  // bf16 tie, rounds up to even
                          std::bit_cast<float>(0x7f7fffffu),  // largest float: bf16 rounds to inf
                          std::bit_cast<float>(0x3fffffffu),  // rounds up into the next binade
                          std::bit_cast<float>(0x00000001u),  // smallest subnormal
                          65504.0f, 65520.0f, 448.0f, 464.0f, 57344.0f, 1e-8f, -3.0e-5f};
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::normal_distribution<float> normal(0.0f, 4.0f);
  while (static_cast<std::int64_t>(v.size()) < n) {
    v.push_back(v.size() % 3 == 0 ? std::bit_cast<float>(bits(rng)) : normal(rng));
  }
  v.resize(static_cast<std::size_t>(n));
  return v;
}

// NaNs may differ in payload, not in sign: a cache write stores the sign's bit on every backend.
bool same_float(float a, float b) {
  return std::isnan(a) ? std::isnan(b) && std::signbit(a) == std::signbit(b)
                       : std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// Runs `check` once per SIMD target compiled in and supported here, the dispatch pinned to it.
template <class F>
void on_every_target(const F& check) {
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    check();
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(RowConvert, StoreMatchesTheScalarRounding) {
  on_every_target([] {
    for (const DType t : kDtypes) {
      for (const std::int64_t n : {1, 7, 16, 37, 128, 131}) {
        for (const float scale : {1.0f, 0.37f}) {
          const std::vector<float> x = special_and_random_values(n);
          const auto bytes = static_cast<std::size_t>(n) * dtype_size(t);
          std::vector<std::byte> got(bytes, std::byte{0x5a}), want(bytes, std::byte{0x5a});
          store_scaled_row(x.data(), n, scale, t, got.data());
          for (std::int64_t i = 0; i < n; ++i) store_from_float(want.data(), t, i, x[static_cast<std::size_t>(i)] * scale);
          for (std::int64_t i = 0; i < n; ++i) {
            // NaNs may differ in payload, not in sign.
            ASSERT_TRUE(same_float(load_as_float(got.data(), t, i), load_as_float(want.data(), t, i)))
                << to_string(t) << " n=" << n << " scale=" << scale << " element " << i << " from "
                << x[static_cast<std::size_t>(i)];
          }
        }
      }
    }
  });
}

TEST(RowConvert, LoadMatchesTheScalarDecoding) {
  on_every_target([] {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> byte(0, 255);
    for (const DType t : kDtypes) {
      for (const std::int64_t n : {1, 7, 16, 37, 128, 131}) {
        std::vector<std::byte> row(static_cast<std::size_t>(n) * dtype_size(t));
        for (auto& b : row) b = static_cast<std::byte>(byte(rng));
        // Infinities, NaNs and the smallest subnormal of each format first (little-endian).
        const std::vector<std::uint8_t> specials =
            dtype_size(t) == 2 ? std::vector<std::uint8_t>{0x00, 0x7c, 0x00, 0xfc, 0x00, 0x7e, 0x01, 0x00, 0x01, 0xfc}
            : dtype_size(t) == 1 ? std::vector<std::uint8_t>{0x7c, 0xfc, 0x7f, 0xff, 0x01, 0x80}
                                 : std::vector<std::uint8_t>{0x00, 0x00, 0x80, 0x7f, 0x01, 0x00, 0xc0, 0x7f};
        std::memcpy(row.data(), specials.data(), std::min(specials.size(), row.size()));
        std::vector<float> got(static_cast<std::size_t>(n));
        load_scaled_row(row.data(), t, n, 0.5f, got.data());
        for (std::int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(same_float(got[static_cast<std::size_t>(i)], load_as_float(row.data(), t, i) * 0.5f))
              << to_string(t) << " n=" << n << " element " << i << " got " << got[static_cast<std::size_t>(i)] << " want " << load_as_float(row.data(), t, i) * 0.5f;
        }
      }
    }
  });
}

// Every f32 exponent with mantissas at and around each format's rounding points (ties to even
// and to odd, one below and above them, all ones), both signs: the stores' codes byte for byte,
// NaN codes included (each encoder has one).
TEST(RowConvert, StoreMatchesTheScalarEncodingOnEveryExponent) {
  std::vector<float> x;
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t exponent = 0; exponent < 256; ++exponent) {
      std::vector<std::uint32_t> mantissas = {0u, 1u, 0x7fffffu};
      for (int j = 0; j < 23; ++j) {
        for (std::uint32_t m : {1u << j, (1u << j) - 1u, (1u << j) + 1u, 3u << j, (3u << j) - 1u, (3u << j) + 1u}) {
          mantissas.push_back(m & 0x7fffffu);
        }
      }
      for (std::uint32_t m : mantissas) x.push_back(std::bit_cast<float>(sign | exponent << 23 | m));
    }
  }
  const auto n = static_cast<std::int64_t>(x.size());
  on_every_target([&] {
    for (const DType t : kDtypes) {
      if (t == DType::kF32) continue;  // stored as given (a NaN's payload may be quieted)
      const auto bytes = static_cast<std::size_t>(n) * dtype_size(t);
      std::vector<std::byte> got(bytes), want(bytes);
      store_scaled_row(x.data(), n, 1.0f, t, got.data());
      for (std::int64_t i = 0; i < n; ++i) store_from_float(want.data(), t, i, x[static_cast<std::size_t>(i)]);
      for (std::int64_t i = 0; i < n; ++i) {
        const auto at = static_cast<std::size_t>(i) * dtype_size(t);
        ASSERT_EQ(std::memcmp(got.data() + at, want.data() + at, dtype_size(t)), 0)
            << to_string(t) << " element " << i << " from bits 0x" << std::hex << std::bit_cast<std::uint32_t>(x[static_cast<std::size_t>(i)]);
      }
    }
  });
}

TEST(RowConvert, AddScaledMatchesTheScalarSum) {
  on_every_target([] {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (const DType t : kDtypes) {
      for (const std::int64_t n : {1, 7, 16, 37, 128, 131}) {
        const std::vector<float> values = special_and_random_values(n);
        std::vector<std::byte> row(static_cast<std::size_t>(n) * dtype_size(t));
        for (std::int64_t i = 0; i < n; ++i) store_from_float(row.data(), t, i, values[static_cast<std::size_t>(i)]);
        std::vector<float> acc(static_cast<std::size_t>(n));
        for (float& a : acc) a = normal(rng);
        std::vector<float> got = acc;
        add_scaled_row(row.data(), t, n, 0.75f, got.data());
        for (std::int64_t i = 0; i < n; ++i) {
          const auto k = static_cast<std::size_t>(i);
          const float want = acc[k] + load_as_float(row.data(), t, i) * 0.75f;
          if (!std::isfinite(want)) {
            ASSERT_TRUE(same_float(got[k], want)) << to_string(t) << " n=" << n << " element " << i;
            continue;
          }
          // A fused multiply-add rounds once where the scalar sum rounds twice.
          const float tol = 2.0f * std::numeric_limits<float>::epsilon() *
                            (std::fabs(acc[k]) + std::fabs(load_as_float(row.data(), t, i) * 0.75f));
          ASSERT_NEAR(got[k], want, tol) << to_string(t) << " n=" << n << " element " << i;
        }
      }
    }
  });
}

}  // namespace
}  // namespace pagedattn::cpu
