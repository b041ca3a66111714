// The whole-page copies on host caches. swap_blocks between caches: pages land byte for byte
// (runs of consecutive pages and scattered ones, every layout, stacked caches, pools of different
// sizes, one cache onto itself), untouched pages stay as they were, and every kind of bad
// argument is rejected with nothing written. copy_blocks within a cache (copy-on-write): the same
// byte-for-byte landing in every layout and dtype (its bad input is in test_bad_input.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "pagedattn/config.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn {
namespace {

// A host cache of `spec` whose K and V bytes are random (seeded), stacked [pages, 2, ...] or not.
struct HostCache {
  HostCache(const KVCacheSpec& s, unsigned seed, bool stacked = false) : spec(s), bytes(s.bytes_per_tensor()) {
    std::mt19937 rng(seed);
    mem.resize(static_cast<std::size_t>(2 * bytes));
    for (auto& b : mem) b = static_cast<std::byte>(rng() & 0xff);
    if (!stacked) {
      kv = s.make_views(mem.data(), mem.data() + bytes);
      return;
    }
    const TensorView all = s.layout == KVLayout::kNHD
                               ? TensorView(mem.data(), s.dtype, {s.num_pages, 2, s.page_size, s.num_kv_heads, s.head_dim})
                               : TensorView(mem.data(), s.dtype, {s.num_pages, 2, s.num_kv_heads, s.page_size, s.head_dim});
    kv = PagedKV::from_stacked(all, s.layout);
  }
  // A copy is a snapshot: its views address its own bytes (the defaulted copy would keep
  // viewing the original's, and a comparison with it could not fail).
  HostCache(const HostCache& o) : spec(o.spec), bytes(o.bytes), mem(o.mem), kv(o.kv) { rebase(o); }
  HostCache& operator=(const HostCache& o) {
    if (this != &o) {
      spec = o.spec;
      bytes = o.bytes;
      mem = o.mem;
      kv = o.kv;
      rebase(o);
    }
    return *this;
  }
  // kv's views address o.mem (both are set from it in the constructor).
  void rebase(const HostCache& o) {
    for (TensorView* t : {&kv.k, &kv.v}) {
      const std::ptrdiff_t at = static_cast<const std::byte*>(t->data()) - o.mem.data();
      *t = TensorView::rebind(*t, mem.data() + at, t->device());
    }
  }
  // Bytes of page p of K (is_v false) or V, wherever the views put them.
  std::vector<std::byte> page(std::int64_t p, bool is_v) const {
    const TensorView& t = is_v ? kv.v : kv.k;
    const auto esize = static_cast<std::int64_t>(dtype_size(spec.dtype));
    const std::int64_t n = spec.page_size * spec.num_kv_heads * spec.head_dim * esize;
    const auto* base = static_cast<const std::byte*>(t.data()) + p * t.stride(0) * esize;
    return {base, base + n};
  }
  KVCacheSpec spec;
  std::int64_t bytes;
  std::vector<std::byte> mem;
  PagedKV kv;
};

KVCacheSpec spec_of(KVLayout layout, DType dtype, std::int64_t pages) {
  return {.layout = layout, .dtype = dtype, .num_pages = pages, .page_size = 5, .num_kv_heads = 3, .head_dim = 32};
}

struct Case {
  KVLayout layout = KVLayout::kNHD;
  DType dtype = DType::kBF16;
  bool stacked = false;
};

class SwapBlocks : public ::testing::TestWithParam<Case> {};

TEST_P(SwapBlocks, CopiesThePagesAndNothingElse) {
  const Case c = GetParam();
  const HostCache src(spec_of(c.layout, c.dtype, 12), 1, c.stacked);
  HostCache dst(spec_of(c.layout, c.dtype, 20), 2, c.stacked);
  const HostCache before = dst;
  // A run of four consecutive pages, a reversed pair and two scattered pages.
  std::vector<std::int64_t> pairs = {3, 10, 4, 11, 5, 12, 6, 13, 9, 0, 8, 1, 0, 19, 11, 7};
  const auto n = static_cast<std::int64_t>(pairs.size() / 2);
  swap_blocks(Context::cpu(), src.kv, dst.kv, TensorView(pairs.data(), DType::kI64, {n, 2}));
  std::vector<bool> written(20, false);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t s = pairs[static_cast<std::size_t>(2 * i)], d = pairs[static_cast<std::size_t>(2 * i + 1)];
    written[static_cast<std::size_t>(d)] = true;
    for (bool is_v : {false, true}) EXPECT_EQ(dst.page(d, is_v), src.page(s, is_v)) << "page " << s << " -> " << d;
  }
  for (std::int64_t p = 0; p < 20; ++p) {
    if (written[static_cast<std::size_t>(p)]) continue;
    for (bool is_v : {false, true}) EXPECT_EQ(dst.page(p, is_v), before.page(p, is_v)) << "untouched page " << p;
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) out.push_back({layout, dtype, false});
  }
  out.push_back({KVLayout::kNHD, DType::kF16, true});
  out.push_back({KVLayout::kHND, DType::kF8E5M2, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, SwapBlocks, ::testing::ValuesIn(cases()), [](const auto& info) {
  return std::string(to_string(info.param.layout)) + "_" + std::string(to_string(info.param.dtype)) +
         (info.param.stacked ? "_stacked" : "");
});

class CopyBlocks : public ::testing::TestWithParam<Case> {};

// Scattered pairs in both index dtypes, a run of consecutive pages, a page copied to two
// destinations (copy-on-write of one shared page for two sequences).
TEST_P(CopyBlocks, CopiesThePagesWithinTheCacheAndNothingElse) {
  const Case c = GetParam();
  const HostCache before(spec_of(c.layout, c.dtype, 16), 5, c.stacked);
  const std::vector<std::int64_t> pairs = {9, 2, 3, 14, 4, 15, 0, 7, 9, 11};
  const auto n = static_cast<std::int64_t>(pairs.size() / 2);
  for (DType index : {DType::kI32, DType::kI64}) {
    std::vector<std::int32_t> pairs32(pairs.begin(), pairs.end());
    std::vector<std::int64_t> pairs64 = pairs;
    const TensorView mapping = index == DType::kI32 ? TensorView(pairs32.data(), DType::kI32, {n, 2})
                                                    : TensorView(pairs64.data(), DType::kI64, {n, 2});
    HostCache fresh = before;
    copy_blocks(Context::cpu(), fresh.kv, mapping);
    std::vector<bool> written(16, false);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t s = pairs[static_cast<std::size_t>(2 * i)], d = pairs[static_cast<std::size_t>(2 * i + 1)];
      written[static_cast<std::size_t>(d)] = true;
      for (bool is_v : {false, true}) {
        EXPECT_EQ(fresh.page(d, is_v), before.page(s, is_v)) << to_string(index) << " page " << s << " -> " << d;
      }
    }
    for (std::int64_t p = 0; p < 16; ++p) {
      if (written[static_cast<std::size_t>(p)]) continue;
      for (bool is_v : {false, true}) EXPECT_EQ(fresh.page(p, is_v), before.page(p, is_v)) << "untouched page " << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CopyBlocks, ::testing::ValuesIn(cases()), [](const auto& info) {
  return std::string(to_string(info.param.layout)) + "_" + std::string(to_string(info.param.dtype)) +
         (info.param.stacked ? "_stacked" : "");
});

TEST(SwapBlocksWithinOneCache, MovesPagesBetweenItsOwnPages) {
  HostCache cache(spec_of(KVLayout::kNHD, DType::kBF16, 8), 3);
  const HostCache before = cache;
  std::vector<std::int32_t> pairs = {0, 5, 1, 6};
  swap_blocks(Context::cpu(), cache.kv, cache.kv, TensorView(pairs.data(), DType::kI32, {2, 2}));
  EXPECT_EQ(cache.page(5, false), before.page(0, false));
  EXPECT_EQ(cache.page(6, true), before.page(1, true));
  EXPECT_EQ(cache.page(0, false), before.page(0, false));
}

// dst's views are src's shifted by one page (dst page i is src page i + 1): the caches' base
// pointers differ, yet a mapping that reads src page 1 and writes dst page 0 would make the
// result depend on the order of the copies. Rejected as the same cache's page would be, with
// nothing written; a mapping whose pages do not meet in memory still copies.
TEST(SwapBlocksOverlap, RejectsPagesBothReadAndWrittenThroughOverlappingViews) {
  const KVCacheSpec s = spec_of(KVLayout::kNHD, DType::kBF16, 6);
  HostCache cache(s, 8);
  auto shifted = [&](const TensorView& t) {
    const std::int64_t page_bytes = t.stride(0) * static_cast<std::int64_t>(dtype_size(t.dtype()));
    return TensorView(static_cast<std::byte*>(t.data()) + page_bytes, t.dtype(),
                      {s.num_pages - 1, s.page_size, s.num_kv_heads, s.head_dim},
                      {t.stride(0), t.stride(1), t.stride(2), t.stride(3)});
  };
  PagedKV dst = cache.kv;
  dst.k = shifted(cache.kv.k);
  dst.v = shifted(cache.kv.v);
  // An Error containing `needle`, and `owner` (the memory dst lies in) unchanged.
  auto expect_rejected = [](const PagedKV& src, const PagedKV& d, HostCache& owner, std::vector<std::int64_t> m,
                            const std::string& needle) {
    const std::vector<std::byte> before = owner.mem;
    try {
      const auto n = static_cast<std::int64_t>(m.size() / 2);
      swap_blocks(Context::cpu(), src, d, TensorView(m.data(), DType::kI64, {n, 2}));
      ADD_FAILURE() << "accepted; expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(owner.mem, before) << needle;
  };
  // Page 1 of src is read by the second pair and written (as dst page 0) by the first.
  expect_rejected(cache.kv, dst, cache, {0, 0, 1, 1},
                  "block_mapping[0] writes dst page 0 (K) over memory that block_mapping[1] reads as src page 1 (K)");
  expect_rejected(cache.kv, dst, cache, {1, 0}, "both as a source and as a destination");
  // dst's K and V over one buffer: each page's K and V copies would land on the same bytes.
  HostCache into(s, 9);
  PagedKV kv_alike = into.kv;
  kv_alike.v = kv_alike.k;
  expect_rejected(cache.kv, kv_alike, into, {0, 3}, "dst.k and dst.v overlap in memory");
  // src page 0 -> dst page 1 (src page 2): no page is both read and written.
  const HostCache before = cache;
  std::vector<std::int64_t> m = {0, 1};
  swap_blocks(Context::cpu(), cache.kv, dst, TensorView(m.data(), DType::kI64, {1, 2}));
  for (bool is_v : {false, true}) {
    EXPECT_EQ(cache.page(2, is_v), before.page(0, is_v));
    EXPECT_EQ(cache.page(1, is_v), before.page(1, is_v));
  }
}

// Each per-tensor fp8 scale is checked unless per-head scales replace that one: per-head K
// scales say nothing about V's (and are compared with the other cache's K scales).
TEST(SwapBlocksScales, ChecksEachPerTensorScaleOnItsOwn) {
  const KVCacheSpec s = spec_of(KVLayout::kNHD, DType::kF8E4M3, 6);
  const HostCache src_cache(s, 10);
  HostCache dst(s, 11);
  std::vector<float> head_scales(static_cast<std::size_t>(s.num_kv_heads), 1.0f);
  const TensorView scales(head_scales.data(), DType::kF32, {s.num_kv_heads});
  std::vector<std::int64_t> m = {0, 1};
  const TensorView mapping(m.data(), DType::kI64, {1, 2});
  PagedKV src = src_cache.kv;
  src.k_head_scales = scales;
  src.v_scale = 1.0f;
  dst.kv.v_scale = 8.0f;
  const std::vector<std::byte> before = dst.mem;
  try {
    swap_blocks(Context::cpu(), src, dst.kv, mapping);
    ADD_FAILURE() << "accepted v_scale 1 -> 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different scales"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("v_scale"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dst.mem, before);
  // With per-head K scales on both sides the per-tensor k_scale is unused and may differ.
  dst.kv.v_scale = 1.0f;
  dst.kv.k_scale = 4.0f;
  dst.kv.k_head_scales = scales;
  swap_blocks(Context::cpu(), src, dst.kv, mapping);
  for (bool is_v : {false, true}) EXPECT_EQ(dst.page(1, is_v), src_cache.page(0, is_v));
}

// Per-head scales are compared head by head, with each other or with the other cache's
// per-tensor scale: a swap between caches whose head 2 differs would change what its values mean.
TEST(SwapBlocksScales, ComparesPerHeadScalesHeadByHead) {
  const KVCacheSpec s = spec_of(KVLayout::kHND, DType::kF8E5M2, 6);
  const HostCache src_cache(s, 12);
  HostCache dst(s, 13);
  std::vector<float> src_heads = {0.5f, 2.0f, 0.25f}, dst_heads = src_heads;
  std::vector<std::int64_t> m = {3, 4};
  const TensorView mapping(m.data(), DType::kI64, {1, 2});
  PagedKV src = src_cache.kv;
  src.v_head_scales = TensorView(src_heads.data(), DType::kF32, {s.num_kv_heads});
  dst.kv.v_head_scales = TensorView(dst_heads.data(), DType::kF32, {s.num_kv_heads});
  auto expect_rejected = [&](const std::string& needle) {
    const std::vector<std::byte> before = dst.mem;
    try {
      swap_blocks(Context::cpu(), src, dst.kv, mapping);
      ADD_FAILURE() << "accepted; expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(dst.mem, before) << needle;
  };
  dst_heads[2] = 0.5f;
  expect_rejected("dst.v_head_scales[2] 0.500000 but src.v_head_scales[2] 0.250000");
  // Per-head on one side, per-tensor on the other: each head against the per-tensor scale.
  dst.kv.v_head_scales = TensorView();
  dst.kv.v_scale = 0.5f;
  expect_rejected("dst.v_scale 0.500000 but src.v_head_scales[1] 2.000000");
  // K on its own: src's per-head K scales against dst's per-tensor k_scale.
  std::fill(src_heads.begin(), src_heads.end(), 0.5f);
  std::vector<float> src_k_heads = {1.0f, 1.0f, 2.0f};
  src.k_head_scales = TensorView(src_k_heads.data(), DType::kF32, {s.num_kv_heads});
  expect_rejected("dst.k_scale 1.000000 but src.k_head_scales[2] 2.000000");
  // Alike head by head: copied.
  src_k_heads[2] = 1.0f;
  swap_blocks(Context::cpu(), src, dst.kv, mapping);
  for (bool is_v : {false, true}) EXPECT_EQ(dst.page(4, is_v), src_cache.page(3, is_v));
}

// Every kind of bad argument: an Error naming it, and dst's bytes unchanged.
TEST(SwapBlocksErrors, RejectsBadInputAndWritesNothing) {
  const HostCache src(spec_of(KVLayout::kNHD, DType::kBF16, 6), 4);
  std::vector<std::int64_t> good = {0, 1, 2, 3};
  auto expect_rejected = [&](const PagedKV& s, HostCache& d, const TensorView& mapping, const Context& ctx,
                             const std::string& needle) {
    const std::vector<std::byte> before = d.mem;
    try {
      swap_blocks(ctx, s, d.kv, mapping);
      ADD_FAILURE() << "accepted; expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(d.mem, before) << needle;
  };
  const TensorView good_map(good.data(), DType::kI64, {2, 2});
  {
    HostCache d(spec_of(KVLayout::kNHD, DType::kF16, 6), 5);
    expect_rejected(src.kv, d, good_map, Context::cpu(), "dst has dtype f16 but src has bf16");
  }
  {
    KVCacheSpec s = spec_of(KVLayout::kNHD, DType::kBF16, 6);
    s.page_size = 4;
    HostCache d(s, 5);
    expect_rejected(src.kv, d, good_map, Context::cpu(), "dst has page_size 4 but src has 5");
  }
  {
    KVCacheSpec s = spec_of(KVLayout::kNHD, DType::kBF16, 6);
    s.num_kv_heads = 2;
    HostCache d(s, 5);
    expect_rejected(src.kv, d, good_map, Context::cpu(), "dst has num_kv_heads 2 but src has 3");
  }
  {
    HostCache d(spec_of(KVLayout::kHND, DType::kBF16, 6), 5);
    expect_rejected(src.kv, d, good_map, Context::cpu(), "dst has layout hnd but src has nhd");
  }
  HostCache d(spec_of(KVLayout::kNHD, DType::kBF16, 4), 5);
  {
    std::vector<std::int64_t> m = {6, 0};
    expect_rejected(src.kv, d, TensorView(m.data(), DType::kI64, {1, 2}), Context::cpu(), "src page 6 is out of range [0, 6)");
  }
  {
    std::vector<std::int64_t> m = {0, 4};
    expect_rejected(src.kv, d, TensorView(m.data(), DType::kI64, {1, 2}), Context::cpu(), "dst page 4 is out of range [0, 4)");
  }
  {
    std::vector<std::int64_t> m = {0, 1, 2, 1};
    expect_rejected(src.kv, d, TensorView(m.data(), DType::kI64, {2, 2}), Context::cpu(), "writes dst page 1 a second time");
  }
  {
    std::vector<std::int64_t> m = {0, 1, 2, 3};
    expect_rejected(src.kv, d, TensorView(m.data(), DType::kI64, {4}), Context::cpu(), "block_mapping has rank 1");
    expect_rejected(src.kv, d, TensorView(m.data(), DType::kI64, {1, 4}), Context::cpu(), "block_mapping dimension 1");
    std::vector<float> f = {0, 1};
    expect_rejected(src.kv, d, TensorView(f.data(), DType::kF32, {1, 2}), Context::cpu(), "block_mapping has dtype f32");
  }
  {
    std::vector<std::int64_t> m = {0, 1, 1, 2};  // page 1 is both read and written within one cache
    expect_rejected(d.kv, d, TensorView(m.data(), DType::kI64, {2, 2}), Context::cpu(), "both as a source and as a destination");
  }
  {
    PagedKV no_v = src.kv;
    no_v.v = TensorView();
    expect_rejected(no_v, d, good_map, Context::cpu(), "src.v is required");
  }
  {
    HostCache f8s(spec_of(KVLayout::kNHD, DType::kF8E4M3, 6), 6), f8d(spec_of(KVLayout::kNHD, DType::kF8E4M3, 6), 7);
    f8d.kv.k_scale = 0.5f;
    expect_rejected(f8s.kv, f8d, good_map, Context::cpu(), "different scales");
  }
  {
    // Pages of K that are not one dense block: head rows 64 elements apart in a wider buffer.
    std::vector<std::byte> wide(static_cast<std::size_t>(4 * src.bytes));
    PagedKV sparse = src.kv;
    sparse.k = TensorView(wide.data(), DType::kBF16, {6, 5, 3, 32}, {960, 192, 64, 1});
    expect_rejected(sparse, d, good_map, Context::cpu(), "one dense block");
  }
  if (!kCudaBuilt) {
    expect_rejected(src.kv, d, good_map, Context{Device::cuda(0)}, "built without CUDA");
  } else {
    expect_rejected(src.kv, d, good_map, Context{Device::cuda(0)}, "src and dst are in host memory but the op runs on cuda:0");
  }
}

}  // namespace
}  // namespace pagedattn
