// CUDA append_kv and copy_blocks against the CPU ops on the same bytes: every layout (separate,
// stacked, padded rows, unaligned starts), cache dtype (fp8 with per-tensor and per-head
// scales), input dtype, head dims 64/80/128 and page sizes 1/16; the whole cache, untouched
// random bytes included, must come out byte-identical. Bad input is rejected with nothing
// written, and append_kv captured in a CUDA graph replays with new slots and values.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <limits>
#include <ostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cache_twin.h"
#include "device_buffer.h"
#include "graph_capture.h"
#include "expect_error.h"
#include "test_name.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn {
namespace {

using test::CacheGeom;
using test::DeviceBuffer;
using test::Twin;
using test::TwinCache;

// ---- inputs --------------------------------------------------------------------------------

struct AppendCase {
  CacheGeom cache;
  DType input = DType::kF32;
  std::int64_t num_tokens = 100;
  bool i32_slots = false;
  bool strided_slots = false;   // slot_mapping with stride 2 (the gaps hold garbage)
  bool strided_input = false;   // k/v rows padded and dims at stride 2
  bool unaligned_input = false; // k/v start one element into their buffers
  bool nonfinite = false;       // inputs include inf and NaN (either sign, f32 signalling too)
};

std::string name_of(const AppendCase& c) {
  std::string s = test::geom_name(c.cache) + "_in" + std::string(to_string(c.input));
  if (c.i32_slots) s += "_i32";
  if (c.strided_slots) s += "_slotstride";
  if (c.strided_input) s += "_instride";
  if (c.unaligned_input) s += "_inunaligned";
  if (c.nonfinite) s += "_nonfinite";
  return test::gtest_name(s);
}
void PrintTo(const AppendCase& c, std::ostream* os) { *os << name_of(c); }

// Random values that are never all zero, with a few that hit the conversions' edges: overflow
// (f16 infinity, fp8 saturation), values below the smallest subnormal, -0, and optionally
// infinities and NaNs.
float sample(std::mt19937_64& rng, float amp, bool nonfinite) {
  static const float kEdges[] = {1e5f, -7e4f, 500.0f, -60000.0f, 1e-7f, -3e-9f, -0.0f};
  static const float kNonFinite[] = {std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN(),
                                     -std::numeric_limits<float>::quiet_NaN(),
                                     std::bit_cast<float>(0x7f800001u),   // signalling
                                     std::bit_cast<float>(0xff812345u)};
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  if (u < 0.03) return kEdges[rng() % std::size(kEdges)];
  if (nonfinite && u < 0.08) return kNonFinite[rng() % std::size(kNonFinite)];
  return std::uniform_real_distribution<float>(-amp, amp)(rng);
}

// New K or V rows [n, heads, head_dim] of `dtype` in a twin buffer, laid out as the case says.
struct TwinRows {
  Twin buf;
  TensorView host, device;
};

TwinRows make_rows(const AppendCase& c, std::mt19937_64& rng) {
  const std::int64_t n = c.num_tokens, H = c.cache.num_kv_heads, D = c.cache.head_dim;
  const std::int64_t row = c.strided_input ? 2 * D + 8 : D;
  const std::int64_t lead = c.unaligned_input ? 1 : 0;
  const auto esize = static_cast<std::int64_t>(dtype_size(c.input));
  TwinRows r;
  r.buf = Twin(static_cast<std::size_t>((lead + n * H * row + 8) * esize));
  r.buf.fill_random(rng);  // the stride gaps hold garbage
  std::byte* base = r.buf.host.data() + lead * esize;
  r.host = c.strided_input ? TensorView(base, c.input, {n, H, D}, {H * row, row, 2})
                           : TensorView(base, c.input, {n, H, D});
  const float amp = is_fp8(c.cache.dtype) ? 3.0f : 2.0f;
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t d = 0; d < D; ++d)
        store_from_float(base, c.input, t * H * row + h * row + d * (c.strided_input ? 2 : 1),
                         sample(rng, amp, c.nonfinite));
  r.buf.upload();
  r.device = r.buf.device_view(r.host);
  return r;
}

// Distinct slots from a random half of the pages (the other pages stay untouched), shuffled,
// with about one token in eight skipped (-1).
std::vector<std::int64_t> random_slots(const CacheGeom& g, std::int64_t n, std::mt19937_64& rng) {
  std::vector<std::int64_t> pages(static_cast<std::size_t>(g.num_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  pages.resize(pages.size() / 2);
  std::vector<std::int64_t> candidates;
  for (std::int64_t p : pages)
    for (std::int64_t o = 0; o < g.page_size; ++o) candidates.push_back(p * g.page_size + o);
  std::shuffle(candidates.begin(), candidates.end(), rng);
  std::vector<std::int64_t> slots;
  std::size_t next = 0;
  for (std::int64_t t = 0; t < n; ++t) {
    const bool skip = rng() % 8 == 0 || next == candidates.size();
    slots.push_back(skip ? -1 : candidates[next++]);
  }
  return slots;
}

// slot_mapping as i32/i64, optionally at stride 2 with out-of-range garbage in between.
struct TwinIndex {
  Twin buf;
  TensorView host, device;
};

TwinIndex make_index(const std::vector<std::int64_t>& values, std::vector<std::int64_t> shape,
                     bool i32, bool strided) {
  const std::int64_t stride = strided ? 2 : 1;
  const auto count = static_cast<std::int64_t>(values.size());
  const std::size_t esize = i32 ? 4 : 8;
  TwinIndex x;
  x.buf = Twin(static_cast<std::size_t>(count * stride + 1) * esize);
  for (std::int64_t i = 0; i < count * stride; ++i) {
    const std::int64_t v = i % stride == 0 ? values[static_cast<std::size_t>(i / stride)] : 1234567;
    if (i32) reinterpret_cast<std::int32_t*>(x.buf.host.data())[i] = static_cast<std::int32_t>(v);
    else reinterpret_cast<std::int64_t*>(x.buf.host.data())[i] = v;
  }
  const DType dt = i32 ? DType::kI32 : DType::kI64;
  x.host = shape.size() == 1 ? TensorView(x.buf.host.data(), dt, {shape[0]}, {stride})
                             : TensorView(x.buf.host.data(), dt, {shape[0], shape[1]}, {shape[1] * stride, stride});
  x.buf.upload();
  x.device = x.buf.device_view(x.host);
  return x;
}

// ---- append_kv -----------------------------------------------------------------------------

class CudaAppendKV : public ::testing::TestWithParam<AppendCase> {};

TEST_P(CudaAppendKV, MatchesCpuBytes) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const AppendCase& c = GetParam();
  std::mt19937_64 rng(1234);
  TwinCache cache = test::make_cache(c.cache, rng);
  TwinRows k = make_rows(c, rng), v = make_rows(c, rng);
  const std::vector<std::int64_t> slots = random_slots(c.cache, c.num_tokens, rng);
  TwinIndex slot_mapping = make_index(slots, {c.num_tokens}, c.i32_slots, c.strided_slots);
  const std::vector<std::byte> before = cache.pool.host;

  append_kv(Context::cpu(), cache.host, k.host, v.host, slot_mapping.host);
  if (std::any_of(slots.begin(), slots.end(), [](std::int64_t s) { return s >= 0; })) {
    ASSERT_FALSE(test::first_difference(cache.pool.host, before).empty()) << "the CPU op wrote nothing";
  }
  append_kv(Context{Device::cuda(0)}, cache.device, k.device, v.device, slot_mapping.device,
            AppendKVOptions{&slot_mapping.host});
  test::cuda_ok(cudaDeviceSynchronize(), "append_kv");
  const std::string diff = test::first_difference(cache.pool.download(), cache.pool.host);
  EXPECT_TRUE(diff.empty()) << diff;
}

std::vector<AppendCase> append_cases() {
  std::vector<AppendCase> out;
  const DType kCacheTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2};
  const DType kInputTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2};
  // Every layout x cache dtype x input dtype (fp8 e4m3 with per-head scales).
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit}) {
    for (DType cache : kCacheTypes) {
      for (DType input : kInputTypes) {
        AppendCase c;
        c.cache.layout = layout;
        c.cache.dtype = cache;
        c.cache.head_scales = cache == DType::kF8E4M3;
        c.input = input;
        out.push_back(c);
      }
    }
  }
  // Head dims and page sizes, every layout, a 16-bit and an fp8 cache.
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit}) {
    for (std::int64_t d : {64, 80, 128}) {
      for (std::int64_t p : {1, 16}) {
        for (DType cache : {DType::kBF16, DType::kF8E4M3, DType::kF32}) {
          AppendCase c;
          c.cache.layout = layout;
          c.cache.dtype = cache;
          c.cache.head_dim = d;
          c.cache.page_size = p;
          c.cache.num_pages = p == 1 ? 200 : 24;
          c.cache.head_scales = is_fp8(cache);
          c.input = DType::kBF16;
          out.push_back(c);
        }
      }
    }
  }
  // Stacked K/V, non-dense pages, unaligned caches, more heads.
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND}) {
    for (DType cache : {DType::kBF16, DType::kF8E5M2, DType::kF32}) {
      AppendCase c;
      c.cache.layout = layout;
      c.cache.dtype = cache;
      c.cache.stacked = true;
      out.push_back(c);
      c.cache.stacked = false;
      c.cache.padded = true;
      out.push_back(c);
      c.cache.padded = false;
      c.cache.elem_offset = 1;
      c.input = cache;
      out.push_back(c);
    }
  }
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit}) {
    AppendCase c;
    c.cache.layout = layout;
    c.cache.num_kv_heads = 8;
    c.cache.head_dim = 64;
    c.cache.dtype = DType::kF8E4M3;
    c.cache.head_scales = true;
    out.push_back(c);
    c.cache.num_kv_heads = 1;
    c.cache.dtype = DType::kF16;
    c.cache.page_size = 1;
    c.cache.num_pages = 300;
    c.num_tokens = 257;
    out.push_back(c);
  }
  // Index and input views: i32, strided slots, strided and unaligned inputs (same dtype as the
  // cache too, where the CPU copies bytes only for contiguous rows).
  for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
    for (KVLayout layout : {KVLayout::kNHD, KVLayout::kVllmSplit}) {
      AppendCase c;
      c.cache.layout = layout;
      c.cache.dtype = dt;
      c.input = dt;
      c.i32_slots = true;
      c.strided_slots = true;
      out.push_back(c);
      c.i32_slots = false;
      c.strided_slots = false;
      c.strided_input = true;
      out.push_back(c);
      c.strided_input = false;
      c.unaligned_input = true;
      out.push_back(c);
    }
  }
  // Infinities and NaNs go through every conversion.
  for (DType cache : kCacheTypes) {
    for (DType input : kInputTypes) {
      AppendCase c;
      c.cache.dtype = cache;
      c.input = input;
      c.nonfinite = true;
      c.cache.head_dim = 64;
      out.push_back(c);
    }
  }
  { AppendCase c; c.num_tokens = 0; out.push_back(c); }
  { AppendCase c; c.num_tokens = 1; out.push_back(c); }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAppendKV, ::testing::ValuesIn(append_cases()),
                         [](const ::testing::TestParamInfo<AppendCase>& info) {
                           return std::to_string(info.index) + "_" + name_of(info.param);
                         });

// ---- copy_blocks ---------------------------------------------------------------------------

struct CopyCase {
  CacheGeom cache;
  std::int64_t num_pairs = 7;
  bool i32 = false;
  bool strided = false;  // block_mapping with strides {4, 2}
};

std::string name_of(const CopyCase& c) {
  std::string s = test::geom_name(c.cache) + "_pairs" + std::to_string(c.num_pairs);
  if (c.i32) s += "_i32";
  if (c.strided) s += "_strided";
  return test::gtest_name(s);
}
void PrintTo(const CopyCase& c, std::ostream* os) { *os << name_of(c); }

// (src, dst) pairs: distinct destinations, sources disjoint from them, some sources used twice.
std::vector<std::int64_t> random_pairs(std::int64_t num_pages, std::int64_t n, std::mt19937_64& rng) {
  std::vector<std::int64_t> pages(static_cast<std::size_t>(num_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  const std::int64_t num_src = std::max<std::int64_t>(1, n - 2);
  std::vector<std::int64_t> flat;
  for (std::int64_t i = 0; i < n; ++i) {
    flat.push_back(pages[static_cast<std::size_t>(i % num_src)]);
    flat.push_back(pages[static_cast<std::size_t>(num_src + i)]);
  }
  return flat;
}

class CudaCopyBlocks : public ::testing::TestWithParam<CopyCase> {};

TEST_P(CudaCopyBlocks, MatchesCpuBytes) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const CopyCase& c = GetParam();
  std::mt19937_64 rng(99);
  TwinCache cache = test::make_cache(c.cache, rng);
  TwinIndex mapping = make_index(random_pairs(c.cache.num_pages, c.num_pairs, rng), {c.num_pairs, 2}, c.i32, c.strided);
  const std::vector<std::byte> before = cache.pool.host;

  copy_blocks(Context::cpu(), cache.host, mapping.host);
  if (c.num_pairs > 0) {
    ASSERT_FALSE(test::first_difference(cache.pool.host, before).empty()) << "the CPU op copied nothing";
  }
  copy_blocks(Context{Device::cuda(0)}, cache.device, mapping.device, CopyBlocksOptions{&mapping.host});
  test::cuda_ok(cudaDeviceSynchronize(), "copy_blocks");
  const std::string diff = test::first_difference(cache.pool.download(), cache.pool.host);
  EXPECT_TRUE(diff.empty()) << diff;
}

std::vector<CopyCase> copy_cases() {
  std::vector<CopyCase> out;
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit}) {
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2}) {
      for (std::int64_t p : {1, 16}) {
        CopyCase c;
        c.cache.layout = layout;
        c.cache.dtype = dt;
        c.cache.page_size = p;
        out.push_back(c);
      }
    }
    for (std::int64_t d : {64, 80}) {
      CopyCase c;
      c.cache.layout = layout;
      c.cache.head_dim = d;
      out.push_back(c);
    }
  }
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND}) {
    for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
      CopyCase c;
      c.cache.layout = layout;
      c.cache.dtype = dt;
      c.cache.stacked = true;
      out.push_back(c);
      c.cache.stacked = false;
      c.cache.padded = true;  // element by element
      out.push_back(c);
      c.cache.padded = false;
      c.cache.elem_offset = 1;  // narrower units
      out.push_back(c);
    }
  }
  { CopyCase c; c.cache.dtype = DType::kF8E4M3; c.cache.page_size = 1; c.cache.num_kv_heads = 1; c.cache.head_dim = 8; c.cache.num_pages = 40; out.push_back(c); }
  { CopyCase c; c.i32 = true; c.strided = true; out.push_back(c); }
  { CopyCase c; c.num_pairs = 0; out.push_back(c); }
  { CopyCase c; c.num_pairs = 1; out.push_back(c); }
  { CopyCase c; c.num_pairs = 100; c.cache.num_pages = 240; c.cache.page_size = 4; out.push_back(c); }
  { CopyCase c; c.num_pairs = 3; c.cache.page_size = 128; c.cache.num_kv_heads = 8; c.cache.dtype = DType::kF32; out.push_back(c); }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaCopyBlocks, ::testing::ValuesIn(copy_cases()),
                         [](const ::testing::TestParamInfo<CopyCase>& info) {
                           return std::to_string(info.index) + "_" + name_of(info.param);
                         });

// ---- bad input -----------------------------------------------------------------------------

// Runs `call`, which must throw an Error whose message contains `needle`, and checks that the
// device cache is unchanged afterwards.
template <class F>
void expect_rejected(F&& call, const char* needle, const Twin& pool) {
  const std::vector<std::byte> before = pool.download();
  test::expect_error_then_sync(call, needle);
  const std::string diff = test::first_difference(pool.download(), before);
  EXPECT_TRUE(diff.empty()) << needle << ": the rejected call wrote to the cache: " << diff;
}

TEST(CudaCacheWritesErrors, AppendKVRejectsBadInputAndWritesNothing) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  AppendCase c;
  c.num_tokens = 20;
  std::mt19937_64 rng(5);
  TwinCache cache = test::make_cache(c.cache, rng);
  TwinRows k = make_rows(c, rng), v = make_rows(c, rng);
  // Distinct valid slots (17 is coprime with the 384 slots), one skipped.
  std::vector<std::int64_t> slots;
  for (std::int64_t i = 0; i < c.num_tokens; ++i) slots.push_back(i * 17 % (c.cache.num_pages * c.cache.page_size));
  slots[4] = -1;
  TwinIndex good = make_index(slots, {c.num_tokens}, false, false);
  const Context ctx{Device::cuda(0)};
  const PagedKV& dc = cache.device;
  // The host copies below differ from the device tensor, which holds valid slots: the op must
  // judge by the host copy and launch nothing.
  auto with_host = [&](std::vector<std::int64_t> host_values, bool i32 = false) {
    return make_index(host_values, {static_cast<std::int64_t>(host_values.size())}, i32, false);
  };
  expect_rejected([&] { append_kv(ctx, dc, k.device, v.device, good.device); }, "options.host_slot_mapping is required", cache.pool);
  std::vector<std::int64_t> bad = slots;
  bad[2] = c.cache.num_pages * c.cache.page_size;
  TwinIndex out_of_range = with_host(bad);
  expect_rejected([&] { append_kv(ctx, dc, k.device, v.device, good.device, {&out_of_range.host}); },
                  "slot_mapping[2] is", cache.pool);
  bad = slots;
  bad[5] = slots[1];
  TwinIndex repeated = with_host(bad);
  expect_rejected([&] { append_kv(ctx, dc, k.device, v.device, good.device, {&repeated.host}); },
                  "slot_mapping[5] = 17 repeats", cache.pool);
  bad = slots;
  bad[3] = -2;
  TwinIndex below = with_host(bad);
  expect_rejected([&] { append_kv(ctx, dc, k.device, v.device, good.device, {&below.host}); }, "is -2", cache.pool);
  TwinIndex wrong_dtype = with_host(slots, true);
  expect_rejected([&] { append_kv(ctx, dc, k.device, v.device, good.device, {&wrong_dtype.host}); },
                  "options.host_slot_mapping has dtype i32", cache.pool);
  TwinIndex shorter = with_host(std::vector<std::int64_t>(slots.begin(), slots.end() - 1));
  expect_rejected([&] { append_kv(ctx, dc, k.device, v.device, good.device, {&shorter.host}); },
                  "options.host_slot_mapping dimension 0", cache.pool);
  expect_rejected([&] { append_kv(ctx, dc, k.device, v.device, good.device, {&good.device}); },
                  "options.host_slot_mapping is on cuda:0", cache.pool);
  expect_rejected([&] { append_kv(ctx, dc, k.host, v.device, good.device, {&good.host}); }, "k is on cpu", cache.pool);
  const TensorView narrow(k.device.data(), c.input, {c.num_tokens, c.cache.num_kv_heads, 64}, Device::cuda(0));
  expect_rejected([&] { append_kv(ctx, dc, k.device, narrow, good.device, {&good.host}); },
                  "v dimension 2 (head_dim) is 64", cache.pool);
  const TensorView fewer(k.device.data(), c.input, {c.num_tokens - 1, c.cache.num_kv_heads, c.cache.head_dim}, Device::cuda(0));
  expect_rejected([&] { append_kv(ctx, dc, fewer, v.device, good.device, {&good.host}); },
                  "k dimension 0 (num_tokens", cache.pool);
  PagedKV host_cache = cache.device;
  host_cache.v = cache.host.v;
  expect_rejected([&] { append_kv(ctx, host_cache, k.device, v.device, good.device, {&good.host}); },
                  "cache.v is on cpu", cache.pool);
  // The good call still works (so the checks above were not rejecting everything).
  append_kv(ctx, dc, k.device, v.device, good.device, {&good.host});
  append_kv(Context::cpu(), cache.host, k.host, v.host, good.host);
  test::cuda_ok(cudaDeviceSynchronize(), "append_kv");
  const std::string diff = test::first_difference(cache.pool.download(), cache.pool.host);
  EXPECT_TRUE(diff.empty()) << diff;
}

TEST(CudaCacheWritesErrors, CopyBlocksRejectsBadInputAndWritesNothing) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  CacheGeom g;
  std::mt19937_64 rng(6);
  TwinCache cache = test::make_cache(g, rng);
  const std::vector<std::int64_t> pairs = {1, 2, 3, 4, 1, 5};
  TwinIndex good = make_index(pairs, {3, 2}, false, false);
  const Context ctx{Device::cuda(0)};
  auto host_copy = [&](std::vector<std::int64_t> values, std::vector<std::int64_t> shape = {3, 2}, bool i32 = false) {
    return make_index(values, shape, i32, false);
  };
  expect_rejected([&] { copy_blocks(ctx, cache.device, good.device); }, "options.host_block_mapping is required", cache.pool);
  TwinIndex overlap = host_copy({1, 2, 2, 4, 1, 5});  // page 2 both written and read
  expect_rejected([&] { copy_blocks(ctx, cache.device, good.device, {&overlap.host}); },
                  "both as a source and as a destination", cache.pool);
  TwinIndex same = host_copy({1, 2, 3, 3, 1, 5});  // src == dst
  expect_rejected([&] { copy_blocks(ctx, cache.device, good.device, {&same.host}); },
                  "both as a source and as a destination", cache.pool);
  TwinIndex twice = host_copy({1, 2, 3, 2, 1, 5});
  expect_rejected([&] { copy_blocks(ctx, cache.device, good.device, {&twice.host}); }, "a second time", cache.pool);
  TwinIndex out_of_range = host_copy({1, 2, 3, g.num_pages, 1, 5});
  expect_rejected([&] { copy_blocks(ctx, cache.device, good.device, {&out_of_range.host}); },
                  "block_mapping[1] dst page 24 is out of range", cache.pool);
  TwinIndex wrong_dtype = host_copy(pairs, {3, 2}, true);
  expect_rejected([&] { copy_blocks(ctx, cache.device, good.device, {&wrong_dtype.host}); },
                  "options.host_block_mapping has dtype i32", cache.pool);
  TwinIndex wrong_shape = host_copy({1, 2, 3, 4}, {2, 2});
  expect_rejected([&] { copy_blocks(ctx, cache.device, good.device, {&wrong_shape.host}); },
                  "options.host_block_mapping dimension 0", cache.pool);
  TwinIndex wide = make_index({1, 2, 3, 4, 5, 6}, {2, 3}, false, false);
  expect_rejected([&] { copy_blocks(ctx, cache.device, wide.device, {&wide.host}); }, "block_mapping dimension 1", cache.pool);
  expect_rejected([&] { copy_blocks(ctx, cache.device, good.host, {&good.host}); }, "block_mapping is on cpu", cache.pool);
  copy_blocks(ctx, cache.device, good.device, {&good.host});
  copy_blocks(Context::cpu(), cache.host, good.host);
  test::cuda_ok(cudaDeviceSynchronize(), "copy_blocks");
  const std::string diff = test::first_difference(cache.pool.download(), cache.pool.host);
  EXPECT_TRUE(diff.empty()) << diff;
}

// ---- CUDA graph ----------------------------------------------------------------------------

// append_kv captured once replays with whatever slots and K/V the same device buffers hold:
// the kernel reads them on the device, the host copy only validated the capture's values.
TEST(CudaCacheWritesGraph, AppendKVReplaysWithNewSlots) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  AppendCase c;
  c.cache.layout = KVLayout::kVllmSplit;
  c.cache.dtype = DType::kF8E4M3;
  c.cache.head_scales = true;
  c.input = DType::kBF16;
  c.num_tokens = 48;
  std::mt19937_64 rng(21);
  TwinCache cache = test::make_cache(c.cache, rng);
  TwinRows k = make_rows(c, rng), v = make_rows(c, rng);
  TwinIndex slots = make_index(random_slots(c.cache, c.num_tokens, rng), {c.num_tokens}, false, false);
  const test::Stream stream;
  const Context ctx{Device::cuda(0), stream.get()};
  const test::CapturedGraph graph(stream.get(), [&] {
    append_kv(ctx, cache.device, k.device, v.device, slots.device, {&slots.host});
  });
  EXPECT_TRUE(test::first_difference(cache.pool.download(), cache.pool.host).empty()) << "capturing must not run the op";

  for (int round = 0; round < 3; ++round) {
    // New slots and values, written into the captured buffers; the host mirrors them.
    // (Copied into the existing host buffers, which the host views point into.)
    const TwinIndex fresh = make_index(random_slots(c.cache, c.num_tokens, rng), {c.num_tokens}, false, false);
    std::copy(fresh.buf.host.begin(), fresh.buf.host.end(), slots.buf.host.begin());
    slots.buf.upload();
    const TwinRows k2 = make_rows(c, rng), v2 = make_rows(c, rng);
    std::copy(k2.buf.host.begin(), k2.buf.host.end(), k.buf.host.begin());
    std::copy(v2.buf.host.begin(), v2.buf.host.end(), v.buf.host.begin());
    k.buf.upload();
    v.buf.upload();
    graph.replay();
    append_kv(Context::cpu(), cache.host, k.host, v.host, slots.host);
    const std::string diff = test::first_difference(cache.pool.download(), cache.pool.host);
    EXPECT_TRUE(diff.empty()) << "round " << round << ": " << diff;
  }
}

// copy_blocks captured once replays with whatever (src, dst) pairs the captured mapping holds
// (valid ones: the host copy validated only the capture's), over a cache that changes between
// replays.
TEST(CudaCacheWritesGraph, CopyBlocksReplaysWithNewMapping) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  CacheGeom g;
  g.layout = KVLayout::kHND;
  g.dtype = DType::kBF16;
  g.page_size = 16;
  const std::int64_t pairs = 6;
  std::mt19937_64 rng(23);
  TwinCache cache = test::make_cache(g, rng);
  TwinIndex mapping = make_index(random_pairs(g.num_pages, pairs, rng), {pairs, 2}, true, false);
  const test::Stream stream;
  const Context ctx{Device::cuda(0), stream.get()};
  const test::CapturedGraph graph(stream.get(), [&] {
    copy_blocks(ctx, cache.device, mapping.device, CopyBlocksOptions{&mapping.host});
  });
  EXPECT_TRUE(test::first_difference(cache.pool.download(), cache.pool.host).empty()) << "capturing must not run the op";

  for (int round = 0; round < 3; ++round) {
    const TwinIndex fresh = make_index(random_pairs(g.num_pages, pairs, rng), {pairs, 2}, true, false);
    std::copy(fresh.buf.host.begin(), fresh.buf.host.end(), mapping.buf.host.begin());
    mapping.buf.upload();
    const std::vector<std::byte> before = cache.pool.host;
    graph.replay();
    copy_blocks(Context::cpu(), cache.host, mapping.host);
    ASSERT_FALSE(test::first_difference(cache.pool.host, before).empty()) << "round " << round << ": the CPU op copied nothing";
    const std::string diff = test::first_difference(cache.pool.download(), cache.pool.host);
    EXPECT_TRUE(diff.empty()) << "round " << round << ": " << diff;
  }
}

}  // namespace
}  // namespace pagedattn
