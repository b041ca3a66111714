// swap_blocks on CUDA: pages swapped out to host memory (pageable and page-locked) and back in
// to a GPU pool come back byte for byte, pages also move between two GPU pools, pages nobody
// named stay untouched, and bad input is rejected with nothing written.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "graph_capture.h"
#include "expect_error.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn {
namespace {

using test::DeviceBuffer;

KVCacheSpec spec_of(KVLayout layout, DType dtype, std::int64_t pages) {
  return {.layout = layout, .dtype = dtype, .num_pages = pages, .page_size = 16, .num_kv_heads = 4, .head_dim = 64};
}

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  return out;
}

// A GPU pool (K then V in one buffer) filled with random bytes.
struct GpuCache {
  GpuCache(const KVCacheSpec& s, unsigned seed) : spec(s), buffer(static_cast<std::size_t>(2 * s.bytes_per_tensor())) {
    buffer.upload(random_bytes(buffer.bytes(), seed).data());
    auto* base = static_cast<std::byte*>(buffer.get());
    kv = s.make_views(base, base + s.bytes_per_tensor(), Device::cuda(0));
  }
  // Page p of K (is_v false) or V, read back.
  std::vector<std::byte> page(std::int64_t p, bool is_v) const {
    const std::vector<std::byte> all = buffer.snapshot();
    const std::int64_t page_bytes = spec.bytes_per_tensor() / spec.num_pages;
    const auto* at = all.data() + (is_v ? spec.bytes_per_tensor() : 0) + p * page_bytes;
    return {at, at + page_bytes};
  }
  KVCacheSpec spec;
  DeviceBuffer buffer;
  PagedKV kv;
};

// A host pool, pageable (std::vector) or page-locked (cudaMallocHost).
struct HostCache {
  HostCache(const KVCacheSpec& s, unsigned seed, bool pinned) : spec(s), bytes(static_cast<std::size_t>(2 * s.bytes_per_tensor())) {
    if (pinned) {
      test::cuda_ok(cudaMallocHost(&pinned_mem, bytes), "cudaMallocHost");
      base = static_cast<std::byte*>(pinned_mem);
    } else {
      pageable.resize(bytes);
      base = pageable.data();
    }
    const std::vector<std::byte> fill = random_bytes(bytes, seed);
    std::copy(fill.begin(), fill.end(), base);
    kv = s.make_views(base, base + s.bytes_per_tensor());
  }
  ~HostCache() {
    if (pinned_mem) cudaFreeHost(pinned_mem);
  }
  HostCache(const HostCache&) = delete;
  HostCache& operator=(const HostCache&) = delete;
  std::vector<std::byte> page(std::int64_t p, bool is_v) const {
    const std::int64_t page_bytes = spec.bytes_per_tensor() / spec.num_pages;
    const std::byte* at = base + (is_v ? spec.bytes_per_tensor() : 0) + p * page_bytes;
    return {at, at + page_bytes};
  }
  KVCacheSpec spec;
  std::size_t bytes;
  std::vector<std::byte> pageable;
  void* pinned_mem = nullptr;
  std::byte* base = nullptr;
  PagedKV kv;
};

struct Case {
  KVLayout layout;
  DType dtype;
  bool pinned;
};

class CudaSwapBlocks : public ::testing::TestWithParam<Case> {};

// Out to the host and back in to other pages, on a stream of its own.
TEST_P(CudaSwapBlocks, RoundTripsThroughHostMemory) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const Case c = GetParam();
  GpuCache gpu(spec_of(c.layout, c.dtype, 24), 1);
  HostCache host(spec_of(c.layout, c.dtype, 10), 2, c.pinned);
  const GpuCache& g = gpu;
  std::vector<std::vector<std::byte>> want_k, want_v;
  const std::vector<std::int64_t> out_pages = {4, 5, 6, 7, 20, 1};
  for (std::int64_t p : out_pages) want_k.push_back(g.page(p, false)), want_v.push_back(g.page(p, true));
  const std::vector<std::byte> untouched_host = host.page(9, false);
  const test::Stream stream;
  const Context ctx{Device::cuda(0), stream.get()};
  // Swap out: GPU pages 4..7 (one run), 20, 1 -> host pages 0..5.
  std::vector<std::int64_t> out_map;
  for (std::size_t i = 0; i < out_pages.size(); ++i) out_map.push_back(out_pages[i]), out_map.push_back(static_cast<std::int64_t>(i));
  swap_blocks(ctx, gpu.kv, host.kv, TensorView(out_map.data(), DType::kI64, {6, 2}));
  test::cuda_ok(cudaStreamSynchronize(stream.get()), "swap out");
  for (std::size_t i = 0; i < out_pages.size(); ++i) {
    EXPECT_EQ(host.page(static_cast<std::int64_t>(i), false), want_k[i]) << "swapped out " << out_pages[i];
    EXPECT_EQ(host.page(static_cast<std::int64_t>(i), true), want_v[i]) << "swapped out " << out_pages[i];
  }
  EXPECT_EQ(host.page(9, false), untouched_host);
  // Swap in: host pages 0..5 -> GPU pages 10..15 (one run); GPU page 16 untouched.
  const std::vector<std::byte> untouched_gpu = g.page(16, true);
  std::vector<std::int32_t> in_map;
  for (std::int32_t i = 0; i < 6; ++i) in_map.push_back(i), in_map.push_back(10 + i);
  swap_blocks(ctx, host.kv, gpu.kv, TensorView(in_map.data(), DType::kI32, {6, 2}));
  test::cuda_ok(cudaStreamSynchronize(stream.get()), "swap in");
  for (std::size_t i = 0; i < out_pages.size(); ++i) {
    EXPECT_EQ(g.page(10 + static_cast<std::int64_t>(i), false), want_k[i]);
    EXPECT_EQ(g.page(10 + static_cast<std::int64_t>(i), true), want_v[i]);
  }
  EXPECT_EQ(g.page(16, true), untouched_gpu);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaSwapBlocks,
                         ::testing::Values(Case{KVLayout::kNHD, DType::kBF16, false}, Case{KVLayout::kNHD, DType::kBF16, true},
                                           Case{KVLayout::kHND, DType::kF8E4M3, true},
                                           Case{KVLayout::kVllmSplit, DType::kF16, false},
                                           Case{KVLayout::kVllmSplit, DType::kF32, true}),
                         [](const auto& info) {
                           return std::string(to_string(info.param.layout)) + "_" +
                                  std::string(to_string(info.param.dtype)) + (info.param.pinned ? "_pinned" : "_pageable");
                         });

TEST(CudaSwapBlocksBetweenPools, MovesPagesFromOneGpuPoolToAnother) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const GpuCache a(spec_of(KVLayout::kNHD, DType::kBF16, 8), 3);
  GpuCache b(spec_of(KVLayout::kNHD, DType::kBF16, 8), 4);
  const std::vector<std::byte> want = a.page(3, true), keep = b.page(0, false);
  std::vector<std::int64_t> m = {3, 7};
  swap_blocks(Context{Device::cuda(0)}, a.kv, b.kv, TensorView(m.data(), DType::kI64, {1, 2}));
  test::cuda_ok(cudaDeviceSynchronize(), "swap");
  EXPECT_EQ(b.page(7, true), want);
  EXPECT_EQ(b.page(0, false), keep);
}

TEST(CudaSwapBlocksErrors, RejectsBadInputAndWritesNothing) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  GpuCache gpu(spec_of(KVLayout::kNHD, DType::kBF16, 8), 5);
  HostCache host(spec_of(KVLayout::kNHD, DType::kBF16, 8), 6, false);
  std::vector<std::int64_t> m = {0, 1};
  const TensorView map(m.data(), DType::kI64, {1, 2});
  const std::vector<std::byte> before = gpu.buffer.snapshot();
  test::expect_error_then_sync([&] { swap_blocks(Context::cpu(), host.kv, gpu.kv, map); },
                               "dst is on cuda:0 but the op runs on cpu");
  HostCache other(spec_of(KVLayout::kHND, DType::kBF16, 8), 7, false);
  test::expect_error_then_sync([&] { swap_blocks(Context{Device::cuda(0)}, other.kv, gpu.kv, map); },
                               "dst has layout nhd but src has hnd");
  std::vector<std::int64_t> far = {0, 8};
  test::expect_error_then_sync(
      [&] { swap_blocks(Context{Device::cuda(0)}, host.kv, gpu.kv, TensorView(far.data(), DType::kI64, {1, 2})); },
      "dst page 8 is out of range [0, 8)");
  DeviceBuffer device_map(16);
  device_map.upload(m.data());
  test::expect_error_then_sync(
      [&] { swap_blocks(Context{Device::cuda(0)}, host.kv, gpu.kv, TensorView(device_map.get(), DType::kI64, {1, 2}, Device::cuda(0))); },
      "block_mapping is on cuda:0");
  EXPECT_EQ(gpu.buffer.snapshot(), before);
}

}  // namespace
}  // namespace pagedattn
