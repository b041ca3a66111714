// CUDA decode against the CPU reference on the same cache bytes: every layout, both page-table
// formats, every KV dtype, head dims, page sizes, group sizes, variants, one-pass and split-K;
// bad input rejected with nothing written; a captured CUDA graph replayed for new lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "expect_error.h"
#include "test_name.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn {
namespace {

using test::DeviceBuffer;
using test::mirror;

struct Case {
  KVLayout layout = KVLayout::kNHD;
  DType kv = DType::kBF16;
  DType q = DType::kBF16;
  std::int64_t head_dim = 128, page_size = 16, num_q_heads = 8, num_kv_heads = 2;
  std::vector<std::int64_t> lens = {1, 17, 300};
  bool csr = false;
  int window = -1;
  float soft_cap = 0.0f;
  bool alibi = false, sinks = false, per_head_scales = false;
  DecodeVariant variant = DecodeVariant::kAuto;
  int partition = 0;
};

std::string name_of(const Case& c) {
  std::string s = std::string(to_string(c.layout)) + "_" + std::string(to_string(c.kv)) + "_q" +
                  std::string(to_string(c.q)) + "_d" + std::to_string(c.head_dim) + "_p" +
                  std::to_string(c.page_size) + "_h" + std::to_string(c.num_q_heads) + "x" +
                  std::to_string(c.num_kv_heads) + (c.csr ? "_csr" : "_bt");
  if (c.window >= 0) s += "_win" + std::to_string(c.window);
  if (c.soft_cap > 0) s += "_cap";
  if (c.alibi) s += "_alibi";
  if (c.sinks) s += "_sinks";
  if (c.per_head_scales) s += "_headscale";
  if (c.variant == DecodeVariant::kOnePass) s += "_onepass";
  if (c.variant == DecodeVariant::kSplitK) s += "_split" + std::to_string(c.partition);
  return test::gtest_name(s);
}

double tolerance(DType out) { return out == DType::kF32 ? 1e-4 : out == DType::kF16 ? 2e-3 : 1.6e-2; }

std::vector<float> to_floats(const std::vector<std::byte>& bytes, DType t) {
  std::vector<float> out(bytes.size() / dtype_size(t));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = load_as_float(bytes.data(), t, static_cast<std::int64_t>(i));
  return out;
}

// A host cache, page table and queries with random contents; unused pages NaN-poisoned.
struct HostProblem {
  KVCacheSpec spec;
  std::vector<std::byte> k, v, q;
  std::vector<float> alibi, sinks, k_scales, v_scales;
  BlockTableData bt;
  CsrPageTableData csr;
  PagedKV cache;
  TensorView q_view;
  PageTable table() { return csr_mode ? PageTable{csr.view()} : PageTable{bt.view()}; }
  bool csr_mode = false;
};

HostProblem build(const Case& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  HostProblem h;
  h.csr_mode = c.csr;
  const std::int64_t S = static_cast<std::int64_t>(c.lens.size()), P = c.page_size;
  std::int64_t pages_needed = 0, max_pages = 1;
  for (auto len : c.lens) {
    pages_needed += (len + P - 1) / P;
    max_pages = std::max(max_pages, (len + P - 1) / P);
  }
  h.spec = KVCacheSpec{c.layout, c.kv, pages_needed + 3, P, c.num_kv_heads, c.head_dim};
  h.k.assign(static_cast<std::size_t>(h.spec.bytes_per_tensor()), std::byte{0xff});  // NaN
  h.v.assign(h.k.size(), std::byte{0xff});
  h.cache = h.spec.make_views(h.k.data(), h.v.data());
  if (is_fp8(c.kv)) {
    h.cache.k_scale = 0.02f;
    h.cache.v_scale = 0.015f;
    if (c.per_head_scales) {
      for (std::int64_t i = 0; i < c.num_kv_heads; ++i) {
        h.k_scales.push_back(0.01f + 0.005f * static_cast<float>(i));
        h.v_scales.push_back(0.012f + 0.004f * static_cast<float>(i));
      }
      h.cache.k_head_scales = TensorView(h.k_scales.data(), DType::kF32, {c.num_kv_heads});
      h.cache.v_head_scales = TensorView(h.v_scales.data(), DType::kF32, {c.num_kv_heads});
    }
  }
  // Shuffled page ids; the block table padded with garbage.
  std::vector<std::int32_t> ids(static_cast<std::size_t>(h.spec.num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  h.bt.num_seqs = S;
  h.bt.max_pages = max_pages + 1;
  h.bt.block_table.assign(static_cast<std::size_t>(S * h.bt.max_pages), -7);
  h.bt.seq_lens.resize(static_cast<std::size_t>(S));
  std::size_t next = 0;
  std::vector<std::int64_t> slots;
  for (std::int64_t s = 0; s < S; ++s) {
    const std::int64_t len = c.lens[static_cast<std::size_t>(s)];
    h.bt.seq_lens[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(len);
    for (std::int64_t j = 0; j * P < len; ++j) h.bt.block_table[static_cast<std::size_t>(s * h.bt.max_pages + j)] = ids[next++];
    for (std::int64_t t = 0; t < len; ++t) {
      slots.push_back(static_cast<std::int64_t>(h.bt.block_table[static_cast<std::size_t>(s * h.bt.max_pages + t / P)]) * P + t % P);
    }
  }
  const auto n = static_cast<std::int64_t>(slots.size());
  std::vector<float> kn(static_cast<std::size_t>(n * c.num_kv_heads * c.head_dim)), vn(kn.size());
  const float amp = is_fp8(c.kv) ? 3.0f : 1.0f;  // exercise the fp8 range through the scales
  for (auto& x : kn) x = uni(rng) * amp;
  for (auto& x : vn) x = uni(rng) * amp;
  append_kv(Context::cpu(), h.cache, TensorView(kn.data(), DType::kF32, {n, c.num_kv_heads, c.head_dim}),
            TensorView(vn.data(), DType::kF32, {n, c.num_kv_heads, c.head_dim}),
            TensorView(slots.data(), DType::kI64, {n}));
  if (c.csr) h.csr = to_csr(h.bt.view(), P);
  h.q.resize(static_cast<std::size_t>(S * c.num_q_heads * c.head_dim) * dtype_size(c.q));
  for (std::int64_t i = 0; i < S * c.num_q_heads * c.head_dim; ++i) store_from_float(h.q.data(), c.q, i, uni(rng));
  h.q_view = TensorView(h.q.data(), c.q, {S, c.num_q_heads, c.head_dim});
  for (std::int64_t i = 0; i < c.num_q_heads; ++i) {
    h.alibi.push_back(-0.05f * static_cast<float>(i + 1));
    h.sinks.push_back(uni(rng) * 2.0f);
  }
  return h;
}

AttentionParams params_of(const Case& c, HostProblem& h) {
  AttentionParams prm;
  prm.window_left = c.window;
  prm.logits_soft_cap = c.soft_cap;
  if (c.alibi) prm.alibi_slopes = TensorView(h.alibi.data(), DType::kF32, {c.num_q_heads});
  if (c.sinks) prm.sinks = TensorView(h.sinks.data(), DType::kF32, {c.num_q_heads});
  return prm;
}

// Device copies of everything the op reads, and the device view of the params / cache.
struct DeviceProblem {
  test::Mirrored k, v, q, kscales, vscales, alibi, sinks, a, b, c;
  PagedKV cache;
  PageTable table;
  AttentionParams params;
};

DeviceProblem to_device(HostProblem& h, const AttentionParams& host_params) {
  DeviceProblem d;
  d.k = mirror(h.cache.k);
  d.v = mirror(h.cache.v);
  d.q = mirror(h.q_view);
  d.cache = h.cache;
  d.cache.k = d.k.view;
  d.cache.v = d.v.view;
  d.kscales = mirror(h.cache.k_head_scales);
  d.vscales = mirror(h.cache.v_head_scales);
  d.cache.k_head_scales = d.kscales.view;
  d.cache.v_head_scales = d.vscales.view;
  d.params = host_params;
  d.alibi = mirror(host_params.alibi_slopes);
  d.sinks = mirror(host_params.sinks);
  d.params.alibi_slopes = d.alibi.view;
  d.params.sinks = d.sinks.view;
  if (h.csr_mode) {
    const CsrPageTable t = h.csr.view();
    d.a = mirror(t.indptr);
    d.b = mirror(t.indices);
    d.c = mirror(t.last_page_len);
    d.table = CsrPageTable{d.a.view, d.b.view, d.c.view};
  } else {
    const BlockTable t = h.bt.view();
    d.a = mirror(t.block_table);
    d.b = mirror(t.seq_lens);
    d.table = BlockTable{d.a.view, d.b.view};
  }
  return d;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool both_inf = std::isinf(want[i]) && got[i] == want[i];
    if (both_inf) continue;
    if (!(std::fabs(got[i] - want[i]) <= tol + tol * std::fabs(want[i]))) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ; first at "
                     << first << ": got " << got[first] << ", expected " << want[first];
}

class CudaDecode : public ::testing::TestWithParam<Case> {};

TEST_P(CudaDecode, MatchesReference) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  HostProblem h = build(c, 42);
  const AttentionParams host_params = params_of(c, h);
  const std::int64_t S = static_cast<std::int64_t>(c.lens.size());
  const std::size_t out_bytes = static_cast<std::size_t>(S * c.num_q_heads * c.head_dim) * dtype_size(c.q);

  std::vector<std::byte> want(out_bytes);
  std::vector<float> want_lse(static_cast<std::size_t>(S * c.num_q_heads));
  Context ref = Context::cpu();
  ref.implementation = Implementation::kReference;
  const PageTable host_table = h.table();
  decode(ref, h.q_view, h.cache, host_table, host_params, TensorView(want.data(), c.q, {S, c.num_q_heads, c.head_dim}),
         TensorView(want_lse.data(), DType::kF32, {S, c.num_q_heads}));

  DeviceProblem d = to_device(h, host_params);
  DeviceBuffer out(out_bytes), lse(want_lse.size() * sizeof(float));
  test::cuda_ok(cudaMemset(out.get(), 0xff, out_bytes), "poison");  // NaN: every element must be written
  Context ctx{Device::cuda(0)};
  DecodeOptions options{c.variant, c.partition, &host_table};
  decode(ctx, d.q.view, d.cache, d.table, d.params,
         TensorView(out.get(), c.q, {S, c.num_q_heads, c.head_dim}, Device::cuda(0)),
         TensorView(lse.get(), DType::kF32, {S, c.num_q_heads}, Device::cuda(0)), options);
  test::cuda_ok(cudaDeviceSynchronize(), "decode");
  std::vector<float> got_lse(want_lse.size());
  lse.download(got_lse.data());
  expect_close(to_floats(out.snapshot(), c.q), to_floats(want, c.q), tolerance(c.q), "output");
  expect_close(got_lse, want_lse, 1e-3, "lse");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const std::vector<std::int64_t> ragged = {0, 1, 15, 16, 17, 97, 513, 2100};
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit}) {
    for (DType kv : {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3, DType::kF8E5M2}) {
      Case c;
      c.layout = layout;
      c.kv = kv;
      c.lens = ragged;
      out.push_back(c);
    }
  }
  for (std::int64_t d : {64, 80, 128, 256}) {
    for (std::int64_t ps : {1, 3, 16, 32}) {
      Case c;
      c.head_dim = d;
      c.page_size = ps;
      c.lens = {1, ps + 1, 200, 1000};
      out.push_back(c);
    }
  }
  for (auto [hq, hkv] : {std::pair{4, 4}, std::pair{8, 4}, std::pair{10, 2}, std::pair{16, 2}, std::pair{32, 2}, std::pair{12, 4}}) {
    Case c;
    c.num_q_heads = hq;
    c.num_kv_heads = hkv;
    out.push_back(c);
  }
  for (DType q : {DType::kF32, DType::kF16}) { Case c; c.q = q; out.push_back(c); }
  { Case c; c.q = DType::kF16; c.kv = DType::kF16; c.lens = ragged; out.push_back(c); }
  { Case c; c.q = DType::kF16; c.kv = DType::kF16; c.head_dim = 64; c.num_q_heads = 40; c.num_kv_heads = 2; out.push_back(c); }
  { Case c; c.num_q_heads = 40; c.num_kv_heads = 2; c.sinks = true; c.alibi = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.csr = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.window = 40; c.lens = ragged; out.push_back(c); }
  { Case c; c.window = 0; out.push_back(c); }
  { Case c; c.soft_cap = 5.0f; out.push_back(c); }
  { Case c; c.alibi = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.sinks = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.sinks = true; c.variant = DecodeVariant::kSplitK; c.partition = 32; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E4M3; c.per_head_scales = true; out.push_back(c); }
  // fp8 through the tensor-core kernel: f16 q, head_dim 64 with two head tiles, split-K + variants.
  { Case c; c.kv = DType::kF8E4M3; c.q = DType::kF16; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E5M2; c.q = DType::kF16; c.per_head_scales = true; c.layout = KVLayout::kHND; out.push_back(c); }
  { Case c; c.kv = DType::kF8E5M2; c.head_dim = 64; c.num_q_heads = 40; c.num_kv_heads = 2; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E4M3; c.variant = DecodeVariant::kSplitK; c.partition = 32; c.sinks = true; c.soft_cap = 6.0f; c.alibi = true; c.per_head_scales = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.variant = DecodeVariant::kOnePass; c.lens = ragged; out.push_back(c); }
  { Case c; c.variant = DecodeVariant::kSplitK; c.partition = 16; c.lens = ragged; out.push_back(c); }
  { Case c; c.variant = DecodeVariant::kSplitK; c.partition = 48; c.page_size = 3; c.window = 100; c.alibi = true; c.soft_cap = 8.0f; c.lens = ragged; out.push_back(c); }
  { Case c; c.layout = KVLayout::kVllmSplit; c.kv = DType::kF8E5M2; c.head_dim = 80; c.csr = true; c.lens = ragged; out.push_back(c); }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaDecode, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::to_string(info.index) + "_" + name_of(info.param);
                         });

TEST(CudaDecodeErrors, RejectsBadInputAndWritesNothing) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  Case c;
  HostProblem h = build(c, 7);
  const AttentionParams host_params = params_of(c, h);
  DeviceProblem d = to_device(h, host_params);
  const std::int64_t S = static_cast<std::int64_t>(c.lens.size());
  DeviceBuffer out(static_cast<std::size_t>(S * c.num_q_heads * c.head_dim) * 2);
  test::cuda_ok(cudaMemset(out.get(), 0x5a, out.bytes()), "fill");
  const auto before = out.snapshot();
  const auto k_before = d.k.buffer.snapshot();
  const TensorView out_view(out.get(), DType::kBF16, {S, c.num_q_heads, c.head_dim}, Device::cuda(0));
  const Context ctx{Device::cuda(0)};
  const PageTable host_table = h.table();
  auto expect_error = [&](auto&& call, const char* needle) {
    test::expect_error_then_sync(call, needle);
    EXPECT_EQ(out.snapshot(), before) << needle;
    EXPECT_EQ(d.k.buffer.snapshot(), k_before) << needle;
  };
  expect_error([&] { decode(ctx, d.q.view, d.cache, d.table, d.params, out_view); }, "host_table");
  expect_error([&] {  // q left on the host
    decode(ctx, h.q_view, d.cache, d.table, d.params, out_view, {}, DecodeOptions{DecodeVariant::kAuto, 0, &host_table});
  }, "q is on cpu");
  // A page id out of range in the host copy.
  BlockTableData bad = h.bt;
  bad.block_table[0] = static_cast<std::int32_t>(h.spec.num_pages + 5);
  const PageTable bad_table = bad.view();
  expect_error([&] {
    decode(ctx, d.q.view, d.cache, d.table, d.params, out_view, {}, DecodeOptions{DecodeVariant::kAuto, 0, &bad_table});
  }, "out of range");
}

// A decode captured once in a CUDA graph replays correctly after the lengths change (within
// the bounds it was planned for): the kernels read lengths from device memory.
TEST(CudaDecodeGraph, ReplaysWithNewLengths) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  Case c;
  c.lens = {700, 1500, 2048, 33};
  HostProblem h = build(c, 11);
  const AttentionParams host_params = params_of(c, h);
  DeviceProblem d = to_device(h, host_params);
  const std::int64_t S = static_cast<std::int64_t>(c.lens.size());
  const std::size_t out_bytes = static_cast<std::size_t>(S * c.num_q_heads * c.head_dim) * 2;
  DeviceBuffer out(out_bytes), workspace(64 << 20);
  cudaStream_t stream;
  test::cuda_ok(cudaStreamCreate(&stream), "stream");
  Context ctx{Device::cuda(0), stream};
  ctx.workspace = {static_cast<std::byte*>(workspace.get()), workspace.bytes()};
  const PageTable host_table = h.table();  // planned for these (maximal) lengths
  const TensorView out_view(out.get(), DType::kBF16, {S, c.num_q_heads, c.head_dim}, Device::cuda(0));
  cudaGraph_t graph;
  test::cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
  decode(ctx, d.q.view, d.cache, d.table, d.params, out_view, {},
         DecodeOptions{DecodeVariant::kSplitK, 256, &host_table});
  test::cuda_ok(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec;
  test::cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");

  for (const std::vector<std::int32_t>& lens : {std::vector<std::int32_t>{700, 1500, 2048, 33},
                                               std::vector<std::int32_t>{5, 1024, 1999, 0},
                                               std::vector<std::int32_t>{256, 257, 1, 32}}) {
    h.bt.seq_lens = lens;  // no longer than planned: the pages already hold these tokens
    test::cuda_ok(cudaMemcpy(d.b.buffer.get(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice), "lens");
    test::cuda_ok(cudaMemset(out.get(), 0xff, out_bytes), "poison");
    test::cuda_ok(cudaGraphLaunch(exec, stream), "replay");
    test::cuda_ok(cudaStreamSynchronize(stream), "sync");
    std::vector<std::byte> want(out_bytes);
    Context ref = Context::cpu();
    ref.implementation = Implementation::kReference;
    decode(ref, h.q_view, h.cache, h.bt.view(), host_params, TensorView(want.data(), DType::kBF16, {S, c.num_q_heads, c.head_dim}));
    expect_close(to_floats(out.snapshot(), DType::kBF16), to_floats(want, DType::kBF16), tolerance(DType::kBF16), "graph replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace pagedattn
