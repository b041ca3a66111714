// CUDA cascade: cascade_decode over the levels find_shared_prefixes lays out, and decode finding
// them by itself, against the CPU reference on a cache where sequences share leading pages
// (forks, nested forks, a fork sharing only part of a page): every layout, both page-table
// formats, KV dtypes, head dims (the gathered-query path and the decode fall-back), page sizes,
// group sizes and variants; bad input rejected with nothing written; captured graphs replayed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device_buffer.h"
#include "graph_capture.h"
#include "expect_error.h"
#include "paged_problem.h"
#include "test_name.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"
#include "pagedattn/shared_prefix.h"

namespace pagedattn {
namespace {

using test::DeviceBuffer;
using test::DeviceProblem;
using test::HostProblem;

// Sequence `to` takes sequence `from`'s pages [0, tokens / page_size).
struct Share {
  std::size_t from, to;
  std::int64_t tokens;
};

struct Case : test::ProblemSpec {
  std::vector<Share> shares;
};

// Seven sequences: 1-3 fork 0 after 640 tokens, 2 forks 1 again after 960 (nested), 6 shares
// 4's first page and a half (the half page stays its own), 5 is empty.
Case forked() {
  Case c;
  c.lens = {1100, 1200, 1030, 700, 41, 0, 1500};
  c.shares = {{0, 1, 640}, {0, 2, 640}, {0, 3, 640}, {1, 2, 960}, {4, 6, 24}};
  return c;
}

std::string name_of(const Case& c) { return test::gtest_name(test::spec_name(c)); }

// Rewrites the host tables so the shares hold. The pages a sequence gives up keep valid data.
void apply_shares(const Case& c, HostProblem& h) {
  const std::int64_t P = c.page_size, W = h.bt.max_pages;
  for (const Share& s : c.shares) {
    for (std::int64_t j = 0; j < s.tokens / P; ++j) {
      h.bt.block_table[s.to * W + j] = h.bt.block_table[s.from * W + j];
    }
  }
  if (c.csr) h.csr = to_csr(h.bt.view(), P);
}

// Device copies of a host cascade layout's levels.
struct DeviceLevels {
  std::vector<test::Mirrored> buffers;
  std::vector<CascadeLevel> levels;
};
DeviceLevels to_device(const std::vector<CascadeLevel>& host) {
  DeviceLevels d;
  d.buffers.reserve(host.size() * 4);
  for (const CascadeLevel& level : host) {
    const auto& t = std::get<CsrPageTable>(level.table);
    for (const TensorView* v : {&t.indptr, &t.indices, &t.last_page_len, &level.seq_to_row}) {
      d.buffers.push_back(test::mirror(*v));
    }
    const std::size_t b = d.buffers.size() - 4;
    d.levels.push_back({CsrPageTable{d.buffers[b].view, d.buffers[b + 1].view, d.buffers[b + 2].view},
                        d.buffers[b + 3].view});
  }
  return d;
}

Context reference() {
  Context ref = Context::cpu();
  ref.implementation = Implementation::kReference;
  return ref;
}

// forked()'s batch built with `seed`, on the host and the device, with the levels
// find_shared_prefixes lays out for it (host views and device copies).
struct ForkedBatch {
  Case c = forked();
  HostProblem h;
  AttentionParams host_params;
  DeviceProblem d;
  std::int64_t S, Hq, D;
  CascadeLayout layout;
  std::vector<CascadeLevel> host_levels;
  DeviceLevels dev;

  explicit ForkedBatch(std::uint64_t seed)
      : h(with_shares(c, test::build(c, seed))),
        host_params(test::params_of(c, h)),
        d(test::to_device(h, host_params)),
        S(static_cast<std::int64_t>(c.lens.size())),
        Hq(c.num_q_heads),
        D(c.head_dim),
        layout(find_shared_prefixes(h.table(), c.page_size, SharedPrefixOptions{0})),
        host_levels(layout.views()),
        dev(to_device(host_levels)) {}

 private:
  static HostProblem with_shares(const Case& c, HostProblem h) {
    apply_shares(c, h);
    return h;
  }
};

class CudaCascade : public ::testing::TestWithParam<Case> {};

TEST_P(CudaCascade, MatchesReference) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  HostProblem h = test::build(c, 42);
  apply_shares(c, h);
  const AttentionParams host_params = test::params_of(c, h);
  const std::int64_t S = static_cast<std::int64_t>(c.lens.size()), Hq = c.num_q_heads, D = c.head_dim;
  const std::size_t out_bytes = static_cast<std::size_t>(S * Hq * D) * dtype_size(c.q);
  const PageTable host_table = h.table();

  std::vector<std::byte> want(out_bytes);
  std::vector<float> want_lse(static_cast<std::size_t>(S * Hq));
  decode(reference(), h.q_view, h.cache, host_table, host_params, TensorView(want.data(), c.q, {S, Hq, D}),
         TensorView(want_lse.data(), DType::kF32, {S, Hq}));

  CascadeLayout layout = find_shared_prefixes(host_table, c.page_size, SharedPrefixOptions{0});
  ASSERT_GE(layout.shared_levels(), 1) << "the case shares prefixes";
  const std::vector<CascadeLevel> host_levels = layout.views();
  DeviceLevels dev_levels = to_device(host_levels);

  DeviceProblem d = test::to_device(h, host_params);
  const Device gpu = Device::cuda(0);
  DeviceBuffer out(out_bytes), lse(want_lse.size() * sizeof(float));
  const TensorView out_view(out.get(), c.q, {S, Hq, D}, gpu), lse_view(lse.get(), DType::kF32, {S, Hq}, gpu);
  auto check = [&](const char* what) {
    test::cuda_ok(cudaDeviceSynchronize(), what);
    std::vector<float> got_lse(want_lse.size());
    lse.download(got_lse.data());
    test::expect_close(test::to_floats(out.snapshot(), c.q), test::to_floats(want, c.q), test::tolerance(c.q), what);
    test::expect_lse_close(got_lse, want_lse, 1e-3, what);
  };
  // Scratch given to the ops and poisoned with NaN before every call: a partial state must be
  // read only where it was written (a gathered level writes its rows' users' states alone).
  DeviceBuffer scratch(std::size_t{64} << 20);
  auto poison = [&] {  // NaN: every element must be written
    test::cuda_ok(cudaMemset(out.get(), 0xff, out_bytes), "poison");
    test::cuda_ok(cudaMemset(lse.get(), 0xff, lse.bytes()), "poison");
    test::cuda_ok(cudaMemset(scratch.get(), 0xff, scratch.bytes()), "poison");
  };
  Context ctx{gpu};
  ctx.workspace = {static_cast<std::byte*>(scratch.get()), scratch.bytes()};

  poison();
  cascade_decode(ctx, d.q.view, d.cache, dev_levels.levels, d.params, out_view, lse_view,
                 CascadeOptions{host_levels});
  check("cascade_decode");
  const std::vector<std::byte> cascade_out = out.snapshot();

  for (const bool use_cascade : {true, false}) {
    poison();
    DecodeOptions options;
    options.host_table = &host_table;
    options.cascade = use_cascade;
    options.cascade_min_saved_tokens = 0;
    decode(ctx, d.q.view, d.cache, d.table, d.params, out_view, lse_view, options);
    check(use_cascade ? "decode finding the cascade" : "plain decode");
    // The same plan on the same data: bit for bit the explicit cascade. Variants that depend on
    // positions keep decode plain.
    if (use_cascade && !c.alibi && c.window < 0) {
      EXPECT_EQ(out.snapshot(), cascade_out) << "decode did not run as the cascade";
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&out](auto&& edit) {
    Case c = forked();
    edit(c);
    out.push_back(c);
  };
  add([](Case&) {});
  add([](Case& c) { c.layout = KVLayout::kHND; });
  add([](Case& c) { c.csr = true; });
  add([](Case& c) { c.layout = KVLayout::kVllmSplit; });  // shared levels: V tiles transposed
  add([](Case& c) { c.layout = KVLayout::kVllmSplit; c.page_size = 3; c.head_dim = 256; });  // V key by key
  add([](Case& c) { c.q = DType::kF16; c.kv = DType::kF16; });
  add([](Case& c) { c.q = DType::kF16; c.kv = DType::kF8E4M3; });
  add([](Case& c) { c.q = DType::kF16; c.kv = DType::kF8E5M2; c.per_head_scales = true; });
  add([](Case& c) { c.kv = DType::kF8E4M3; });  // bf16 q, fp8 cache: tiles widened to f16
  add([](Case& c) { c.q = DType::kF32; c.kv = DType::kF32; });
  add([](Case& c) { c.head_dim = 64; });
  add([](Case& c) { c.head_dim = 80; });
  add([](Case& c) { c.head_dim = 256; });
  add([](Case& c) { c.num_q_heads = 4; c.num_kv_heads = 4; });
  add([](Case& c) { c.num_q_heads = 40; c.num_kv_heads = 2; });  // 7 users x 20 heads: 2 row tiles
  add([](Case& c) { c.soft_cap = 5.0f; });
  add([](Case& c) { c.sinks = true; });
  add([](Case& c) { c.alibi = true; });  // positions matter: levels run as decodes
  add([](Case& c) { c.window = 700; });
  add([](Case& c) { c.page_size = 1; });
  add([](Case& c) {
    c.page_size = 3;
    c.shares = {{0, 1, 639}, {0, 2, 639}, {0, 3, 639}, {1, 2, 960}, {4, 6, 24}};
  });
  add([](Case& c) { c.page_size = 32; });
  // Many users of one long prefix: the gathered path splits the KV over the GPU.
  add([](Case& c) {
    c.lens.assign(24, 0);
    c.shares.clear();
    for (std::size_t s = 0; s < c.lens.size(); ++s) {
      c.lens[s] = 4096 + 37 * static_cast<std::int64_t>(s);
      if (s > 0) c.shares.push_back({0, s, 4096});
    }
  });
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaCascade, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::to_string(info.index) + "_" + name_of(info.param); });

TEST(CudaCascadeErrors, RejectsBadInputAndWritesNothing) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  ForkedBatch b(5);
  auto& [c, h, host_params, d, S, Hq, D, layout, host_levels, dev] = b;
  DeviceBuffer out(static_cast<std::size_t>(S * c.num_q_heads * c.head_dim) * 2);
  test::cuda_ok(cudaMemset(out.get(), 0x5a, out.bytes()), "fill");
  const auto before = out.snapshot();
  const TensorView out_view(out.get(), c.q, {S, c.num_q_heads, c.head_dim}, Device::cuda(0));
  auto expect_rejected = [&](std::span<const CascadeLevel> levels, const CascadeOptions& options, const char* needle) {
    test::expect_error_then_sync([&] {
      cascade_decode(Context{Device::cuda(0)}, d.q.view, d.cache, levels, d.params, out_view, {}, options);
    }, needle);
    EXPECT_EQ(out.snapshot(), before) << needle;
  };
  expect_rejected(dev.levels, CascadeOptions{}, "host_levels is required");
  // The host copy names a page outside the cache.
  layout.levels[0].table.indices[0] = static_cast<std::int32_t>(h.spec.num_pages);
  expect_rejected(dev.levels, CascadeOptions{layout.views()}, "out of range");
  layout.levels[0].table.indices[0] = 0;
  // A host map the device level lacks.
  std::vector<CascadeLevel> no_map = dev.levels;
  no_map[0].seq_to_row = {};
  expect_rejected(no_map, CascadeOptions{host_levels}, "both given or both absent");
  // Host levels on the device.
  expect_rejected(dev.levels, CascadeOptions{dev.levels}, "but the op runs on");

  // decode finding the sharing still checks its device table against the host copy.
  const PageTable host_table = h.table();
  const BlockTable& dev_bt = std::get<BlockTable>(d.table);
  const TensorView narrow(dev_bt.block_table.data(), DType::kI32, {S, h.bt.max_pages - 1},
                          {h.bt.max_pages, 1}, Device::cuda(0));
  DecodeOptions options;
  options.host_table = &host_table;
  options.cascade_min_saved_tokens = 0;
  test::expect_error_then_sync([&] {
    decode(Context{Device::cuda(0)}, d.q.view, d.cache, BlockTable{narrow, dev_bt.seq_lens}, d.params, out_view, {},
           options);
  }, "as in the host copy");
  EXPECT_EQ(out.snapshot(), before) << "decode with a bad device table";
}

// Forks nested 17 deep: more levels than the CUDA cascade takes, so decode runs plain (and
// must not throw).
TEST(CudaCascade, DeepNestingFallsBackToPlainDecode) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  Case c;
  c.lens.assign(18, 20 * c.page_size);
  for (std::size_t s = 0; s + 1 < c.lens.size(); ++s) {
    for (std::size_t t = s + 1; t < c.lens.size(); ++t) c.shares.push_back({s, t, static_cast<std::int64_t>(s + 1) * c.page_size});
  }
  HostProblem h = test::build(c, 9);
  apply_shares(c, h);
  const PageTable host_table = h.table();
  ASSERT_GT(find_shared_prefixes(host_table, c.page_size, SharedPrefixOptions{0}).levels.size(), 16u);
  const AttentionParams host_params = test::params_of(c, h);
  const std::int64_t S = static_cast<std::int64_t>(c.lens.size()), Hq = c.num_q_heads, D = c.head_dim;
  std::vector<std::byte> want(static_cast<std::size_t>(S * Hq * D) * 2);
  decode(reference(), h.q_view, h.cache, host_table, host_params, TensorView(want.data(), c.q, {S, Hq, D}));
  DeviceProblem d = test::to_device(h, host_params);
  DeviceBuffer out(want.size());
  DecodeOptions options;
  options.host_table = &host_table;
  options.cascade_min_saved_tokens = 0;
  decode(Context{Device::cuda(0)}, d.q.view, d.cache, d.table, d.params,
         TensorView(out.get(), c.q, {S, Hq, D}, Device::cuda(0)), {}, options);
  test::cuda_ok(cudaDeviceSynchronize(), "decode");
  test::expect_close(test::to_floats(out.snapshot(), c.q), test::to_floats(want, c.q), test::tolerance(c.q), "deep");
}

// cascade_decode_workspace_bytes: a forked batch's cascade needs its levels' partial states;
// exactly that many bytes of ctx.workspace run it, fewer are rejected, the CPU needs none.
TEST(CudaCascadeWorkspace, QueryGivesWhatTheOpNeeds) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  ForkedBatch b(12);
  auto& [c, h, host_params, d, S, Hq, D, layout, host_levels, dev] = b;
  DeviceBuffer out(static_cast<std::size_t>(S * Hq * D) * 2);
  const TensorView out_view(out.get(), DType::kBF16, {S, Hq, D}, Device::cuda(0));
  Context ctx{Device::cuda(0)};
  const std::size_t need =
      cascade_decode_workspace_bytes(ctx, d.q.view, d.cache, dev.levels, d.params, out_view, {}, CascadeOptions{host_levels});
  EXPECT_GT(need, 0u);
  DeviceBuffer scratch(need);
  ctx.workspace = {static_cast<std::byte*>(scratch.get()), need};
  cascade_decode(ctx, d.q.view, d.cache, dev.levels, d.params, out_view, {}, CascadeOptions{host_levels});
  test::cuda_ok(cudaDeviceSynchronize(), "cascade_decode");
  std::vector<std::byte> want(out.bytes());
  cascade_decode(reference(), h.q_view, h.cache, layout.views(), host_params, TensorView(want.data(), DType::kBF16, {S, Hq, D}));
  test::expect_close(test::to_floats(out.snapshot(), DType::kBF16), test::to_floats(want, DType::kBF16),
                     test::tolerance(DType::kBF16), "with exactly the queried workspace");
  ctx.workspace = {static_cast<std::byte*>(scratch.get()), need - 16};
  test::expect_error_then_sync(
      [&] { cascade_decode(ctx, d.q.view, d.cache, dev.levels, d.params, out_view, {}, CascadeOptions{host_levels}); },
      "ctx.workspace has");
  std::vector<std::byte> host_out(out.bytes());
  EXPECT_EQ(cascade_decode_workspace_bytes(Context::cpu(), h.q_view, h.cache, layout.views(), host_params,
                                           TensorView(host_out.data(), DType::kBF16, {S, Hq, D})),
            0u);
}

// A cascade_decode captured once replays correctly after the row maps, the rows' pages and
// the lengths change within the plan's bounds (all read on the device). A decode captured
// while sharing is present runs plain (the sharing of a replay is unknown) and stays correct
// after the sharing changes.
TEST(CudaCascadeGraph, ReplaysWithNewRowsAndLengths) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  ForkedBatch b(11);
  auto& [c, h, host_params, d, S, Hq, D, layout, host_levels, dev] = b;
  const std::size_t out_bytes = static_cast<std::size_t>(S * Hq * D) * 2;
  DeviceBuffer out(out_bytes), workspace(64 << 20);
  const test::Stream stream;
  Context ctx{Device::cuda(0), stream.get()};
  ctx.workspace = {static_cast<std::byte*>(workspace.get()), workspace.bytes()};
  const TensorView out_view(out.get(), DType::kBF16, {S, Hq, D}, Device::cuda(0));
  // Replays `graph` and compares with `reference_op` writing the expected output.
  auto replay = [&](const test::CapturedGraph& graph, auto&& reference_op, const char* what) {
    test::cuda_ok(cudaMemset(out.get(), 0xff, out_bytes), "poison");
    graph.replay();
    std::vector<std::byte> want(out_bytes);
    reference_op(TensorView(want.data(), DType::kBF16, {S, Hq, D}));
    test::expect_close(test::to_floats(out.snapshot(), DType::kBF16), test::to_floats(want, DType::kBF16),
                       test::tolerance(DType::kBF16), what);
  };
  auto cascade_reference = [&](const TensorView& want) {
    cascade_decode(reference(), h.q_view, h.cache, layout.views(), host_params, want);
  };
  auto upload = [](const test::Mirrored& m, const std::vector<std::int32_t>& v) {
    test::cuda_ok(cudaMemcpy(m.buffer.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload");
  };

  const test::CapturedGraph cascade_graph(stream.get(), [&] {
    cascade_decode(ctx, d.q.view, d.cache, dev.levels, d.params, out_view, {}, CascadeOptions{host_levels});
  });
  replay(cascade_graph, cascade_reference, "as captured");
  // Sequence 3 leaves the outer shared row (-1), sequence 1's own row gets shorter, and the
  // outer shared row's first page becomes another page of the cache.
  CascadeLayout::Level& outer = layout.levels[0];
  CascadeLayout::Level& own = layout.levels.back();
  outer.seq_to_row[3] = -1;
  own.table.last_page_len[static_cast<std::size_t>(own.seq_to_row[1])] = 1;
  std::swap(outer.table.indices[0], outer.table.indices[1]);
  upload(dev.buffers[3], outer.seq_to_row);
  upload(dev.buffers[1], outer.table.indices);
  upload(dev.buffers[dev.buffers.size() - 2], own.table.last_page_len);
  replay(cascade_graph, cascade_reference, "new rows and lengths");

  const PageTable host_table = h.table();
  DecodeOptions options;
  options.host_table = &host_table;
  options.cascade_min_saved_tokens = 0;
  const test::CapturedGraph decode_graph(stream.get(), [&] {
    decode(ctx, d.q.view, d.cache, d.table, d.params, out_view, {}, options);
  });
  auto decode_reference = [&](const TensorView& want) {
    decode(reference(), h.q_view, h.cache, h.bt.view(), host_params, want);
  };
  replay(decode_graph, decode_reference, "decode as captured");
  // Sequence 2 stops sharing sequence 0's first page (it takes a full page of sequence 4's): a
  // cascade baked into the graph would attend the wrong page.
  const std::int64_t W = h.bt.max_pages;
  h.bt.block_table[static_cast<std::size_t>(2 * W)] = h.bt.block_table[static_cast<std::size_t>(4 * W + 1)];
  upload(d.a, h.bt.block_table);
  replay(decode_graph, decode_reference, "decode after the sharing changed");
}

}  // namespace
}  // namespace pagedattn
