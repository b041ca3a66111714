// Tensor views: sizes whose element count or byte span does not fit in int64 rejected at
// construction (directly and through DLPack), slice / select / element_ptr arguments that would
// overflow or run past the view rejected, and the edges of the legal ranges still accepted.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "expect_error.h"
#include "pagedattn/dlpack.h"
#include "pagedattn/error.h"
#include "pagedattn/tensor.h"

namespace pagedattn {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

using pagedattn::testing::expect_invalid_argument;

TEST(TensorViewSizes, ElementCountPastInt64IsRejected) {
  // 2^40 * 2^20 * 16 = 2^64 elements: the count wrapped to 0, so a null pointer passed the ops'
  // null check and append_kv wrote through it.
  expect_invalid_argument([] { (void)TensorView(nullptr, DType::kF32, {1LL << 40, 1LL << 20, 1, 16}); },
               "f32[1099511627776, 1048576, 1, 16] has more elements than an int64 counts");
  const std::int64_t shape[] = {1LL << 40, 1LL << 20, 1, 16}, strides[] = {1LL << 24, 16, 16, 1};
  expect_invalid_argument([&] { (void)TensorView(nullptr, DType::kF32, shape, strides); }, "more elements than an int64");
  expect_invalid_argument([] { (void)TensorView(nullptr, DType::kF32, {1LL << 40, 1LL << 20, 1, 16}, {1LL << 24, 16, 16, 1}); },
               "more elements than an int64");
  // Zero sizes do not excuse the others: the row-major strides of this view would overflow.
  expect_invalid_argument([] { (void)TensorView(nullptr, DType::kF32, {0, 1LL << 40, 1LL << 40}); }, "more elements");
}

TEST(TensorViewSizes, ByteSpanPastInt64IsRejected) {
  // 2^61 f32 elements count fine but span 2^63 bytes.
  expect_invalid_argument([] { (void)TensorView(nullptr, DType::kF32, {1LL << 61}); },
               "f32[2305843009213693952] strides [1] spans more bytes than an int64 counts");
  // Few elements, far apart (either sign of stride).
  expect_invalid_argument([] { (void)TensorView(nullptr, DType::kI32, {3}, {1LL << 61}); }, "spans more bytes");
  expect_invalid_argument([] { (void)TensorView(nullptr, DType::kI32, {3}, {-(1LL << 61)}); }, "spans more bytes");
  expect_invalid_argument([] { (void)TensorView(nullptr, DType::kI64, {2}, {std::numeric_limits<std::int64_t>::min()}); },
               "spans more bytes");
}

TEST(TensorViewSizes, LargeButRepresentableShapesAreAccepted) {
  // A size-1 dimension contributes nothing to the span whatever its stride; zero sizes make an
  // empty view.
  const TensorView one(nullptr, DType::kF32, {1, 4}, {kMax, 1});
  EXPECT_EQ(one.numel(), 4);
  const TensorView empty(nullptr, DType::kF32, {1LL << 40, 0, 1LL << 20});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.stride(0), 0);
  const TensorView big(nullptr, DType::kBF16, {1LL << 30, 1LL << 31});
  EXPECT_EQ(big.numel(), 1LL << 61);
  EXPECT_TRUE(big.is_contiguous());
}

TEST(TensorViewSizes, DLPackElementCountPastInt64IsRejected) {
  std::int64_t shape[] = {1LL << 40, 1LL << 20, 1, 16};
  DLTensor t{};
  t.device = {kDLCPU, 0};
  t.ndim = 4;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  expect_invalid_argument([&] { (void)from_dlpack(t); }, "DLPack tensor of shape [1099511627776, 1048576, 1, 16] has more elements");
  // The same with explicit strides, and with a span too wide for its few elements.
  std::int64_t strides[] = {1LL << 24, 16, 16, 1};
  t.strides = strides;
  expect_invalid_argument([&] { (void)from_dlpack(t); }, "has more elements");
  std::vector<float> mem(4);
  std::int64_t three[] = {3}, far[] = {1LL << 62};
  t.data = mem.data();
  t.ndim = 1;
  t.shape = three;
  t.strides = far;
  expect_invalid_argument([&] { (void)from_dlpack(t); }, "spans more bytes");
}

TEST(TensorViewSlices, RangesThatOverflowAreRejected) {
  std::vector<float> mem(4);
  const TensorView v(mem.data(), DType::kF32, {4});
  // start + length wrapped negative and passed the range check: a view before the buffer.
  expect_invalid_argument([&] { (void)v.slice(0, kMax, 1); }, "slice of length 1 at 9223372036854775807 of dimension 0");
  expect_invalid_argument([&] { (void)v.slice(0, 1, kMax); }, "out of range for f32[4]");
  expect_invalid_argument([&] { (void)v.slice(0, kMax, kMax); }, "out of range");
  expect_invalid_argument([&] { (void)v.slice(0, 4, 1); }, "out of range");
  expect_invalid_argument([&] { (void)v.slice(0, -1, 1); }, "out of range");
  expect_invalid_argument([&] { (void)v.slice(1, 0, 1); }, "of dimension 1");
  expect_invalid_argument([&] { (void)v.select(0, kMax); }, "index 9223372036854775807 of dimension 0 is out of range");
  expect_invalid_argument([&] { (void)v.select(0, 4); }, "index 4 of dimension 0");
  expect_invalid_argument([&] { (void)v.select(0, -1); }, "index -1");
}

TEST(TensorViewSlices, EdgesOfTheRangeAreAccepted) {
  std::vector<float> mem(12);
  const TensorView v(mem.data(), DType::kF32, {3, 4});
  EXPECT_EQ(v.slice(0, 3, 0).size(0), 0);
  EXPECT_EQ(v.slice(1, 1, 3).data(), mem.data() + 1);
  EXPECT_EQ(v.slice(-1, 0, 4).size(1), 4);
  const TensorView row = v.select(0, 2);
  EXPECT_EQ(row.rank(), 1);
  EXPECT_EQ(row.data(), mem.data() + 8);
  EXPECT_EQ(v.select(-1, 3).data(), mem.data() + 3);
}

TEST(TensorViewSlices, ElementPtrTakesAtMostOneIndexPerDimension) {
  std::vector<float> mem(12);
  const TensorView v(mem.data(), DType::kF32, {3, 4});
  EXPECT_EQ(v.element_ptr({2, 3}), mem.data() + 11);
  EXPECT_EQ(v.element_ptr({1}), mem.data() + 4);
  // Past kMaxRank the strides were read past their array; past the rank (after a select, say)
  // they are stale.
  expect_invalid_argument([&] { (void)v.element_ptr({0, 0, 0, 0, 0, 0, 0}); }, "7 indices for f32[3, 4]");
  expect_invalid_argument([&] { (void)v.select(0, 1).element_ptr({0, 0}); }, "2 indices for f32[4]");
}

}  // namespace
}  // namespace pagedattn
