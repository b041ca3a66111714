// CUDA decode against the CPU reference on the same cache bytes: every layout, both page-table
// formats, every KV dtype, head dims, page sizes, group sizes, variants, one-pass and split-K;
// bad input rejected with nothing written; a captured CUDA graph replayed for new lengths;
// repeated calls bit for bit the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "graph_capture.h"
#include "paged_problem.h"
#include "expect_error.h"
#include "test_name.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn {
namespace {

using test::DeviceBuffer;
using test::mirror;
using test::build;
using test::params_of;
using test::to_device;
using test::expect_close;
using test::tolerance;
using test::to_floats;
using test::HostProblem;
using test::DeviceProblem;

struct Case : test::ProblemSpec {
  DecodeVariant variant = DecodeVariant::kAuto;
  int partition = 0;
  std::optional<DType> out_dtype;  // the output's dtype where it is not q's
  // A suffix of the test's name by which the sanitizer filters (CMakeLists.txt) pick the case,
  // so that they keep their cases when the table grows.
  std::string tag;
  bool lse = true;  // ask for the LSE (without it the kernels skip its stores)
};

std::string name_of(const Case& c) {
  std::string s = test::spec_name(c);
  if (c.variant == DecodeVariant::kOnePass) s += "_onepass";
  if (c.variant == DecodeVariant::kSplitK) s += "_split" + std::to_string(c.partition);
  if (c.out_dtype) s += "_out_" + std::string(to_string(*c.out_dtype));
  if (!c.lse) s += "_nolse";
  if (!c.tag.empty()) s += "_" + c.tag;
  return test::gtest_name(s);
}

class CudaDecode : public ::testing::TestWithParam<Case> {};

TEST_P(CudaDecode, MatchesReference) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  HostProblem h = build(c, 42);
  const AttentionParams host_params = params_of(c, h);
  const std::int64_t S = static_cast<std::int64_t>(c.lens.size());
  const DType out_t = c.out_dtype.value_or(c.q);
  const std::size_t out_bytes = static_cast<std::size_t>(S * c.num_q_heads * c.head_dim) * dtype_size(out_t);

  std::vector<std::byte> want(out_bytes);
  std::vector<float> want_lse(static_cast<std::size_t>(S * c.num_q_heads));
  Context ref = Context::cpu();
  ref.implementation = Implementation::kReference;
  const PageTable host_table = h.table();
  decode(ref, h.q_view, h.cache, host_table, host_params, TensorView(want.data(), out_t, {S, c.num_q_heads, c.head_dim}),
         TensorView(want_lse.data(), DType::kF32, {S, c.num_q_heads}));

  DeviceProblem d = to_device(h, host_params);
  // NaN: every element of the results must be written, and no split's partial state read
  // unless written (the scratch is the op's, poisoned too).
  DeviceBuffer out(out_bytes), lse(want_lse.size() * sizeof(float)), scratch(std::size_t{64} << 20);
  for (const DeviceBuffer* b : {&out, &lse, &scratch}) test::cuda_ok(cudaMemset(b->get(), 0xff, b->bytes()), "poison");
  Context ctx{Device::cuda(0)};
  ctx.workspace = {static_cast<std::byte*>(scratch.get()), scratch.bytes()};
  DecodeOptions options{c.variant, c.partition, &host_table};
  const TensorView lse_view = c.lse ? TensorView(lse.get(), DType::kF32, {S, c.num_q_heads}, Device::cuda(0)) : TensorView{};
  decode(ctx, d.q.view, d.cache, d.table, d.params,
         TensorView(out.get(), out_t, {S, c.num_q_heads, c.head_dim}, Device::cuda(0)), lse_view, options);
  test::cuda_ok(cudaDeviceSynchronize(), "decode");
  std::vector<float> got_lse(want_lse.size());
  lse.download(got_lse.data());
  // The kernels compute in q's precision (bf16 or f16 probabilities into the p.v): the coarser
  // of q's and the output's tolerances. fp8 caches add no error of their own here: the
  // reference reads the same quantised bytes and scales (quantisation error against unquantised
  // rows is the cache writes' concern, tests/cpu/test_row_convert.cpp).
  expect_close(to_floats(out.snapshot(), out_t), to_floats(want, out_t), std::max(tolerance(c.q), tolerance(out_t)), "output");
  if (c.lse) {
    test::expect_lse_close(got_lse, want_lse, 1e-3, "lse");
  } else {  // not asked for: left as poisoned
    EXPECT_TRUE(std::all_of(got_lse.begin(), got_lse.end(), [](float x) { return std::isnan(x); })) << "lse written";
  }
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
      if (layout == KVLayout::kNHD && kv == DType::kF8E4M3) c.tag = "fp8wide1";
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
  // fp8 steps take two tiles: odd tile counts per warp, pages that tiles straddle, and page ids
  // staged in several chunks whose boundaries fall mid-tile.
  { Case c; c.kv = DType::kF8E4M3; c.q = DType::kF16; c.page_size = 3; c.variant = DecodeVariant::kOnePass; c.lens = {1, 17, 48, 3100, 16401}; c.tag = "fp8wide2"; out.push_back(c); }
  { Case c; c.kv = DType::kF8E4M3; c.variant = DecodeVariant::kSplitK; c.partition = 32; c.sinks = true; c.soft_cap = 6.0f; c.alibi = true; c.per_head_scales = true; c.lens = ragged; c.tag = "fp8wide3"; out.push_back(c); }
  // bf16 q past f16's range over a fp8 cache: the tensor-core kernel scales it into range first.
  { Case c; c.kv = DType::kF8E4M3; c.q_amp = 200000.0f; c.lens = ragged; out.push_back(c); }
  { Case c; c.variant = DecodeVariant::kOnePass; c.lens = ragged; out.push_back(c); }
  // An output dtype other than q's, through each kernel family's store: the bf16 TMA kernel
  // (one pass and split-K), f32 q, and the fp8 tensor-core kernel.
  { Case c; c.out_dtype = DType::kF32; c.lens = ragged; out.push_back(c); }
  { Case c; c.out_dtype = DType::kF16; c.variant = DecodeVariant::kSplitK; c.partition = 64; c.lens = ragged; out.push_back(c); }
  { Case c; c.q = DType::kF32; c.out_dtype = DType::kBF16; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E4M3; c.q = DType::kF16; c.out_dtype = DType::kF32; c.lens = ragged; out.push_back(c); }
  // One CTA over more than 1024 pages: its page ids are staged in several chunks (the TMA
  // variant's barrier phases run on across them); a window starting mid-tile, and sequences
  // ending mid-tile in the second chunk.
  { Case c; c.variant = DecodeVariant::kOnePass; c.layout = KVLayout::kHND; c.lens = {16401, 20000}; out.push_back(c); }
  { Case c; c.variant = DecodeVariant::kOnePass; c.window = 17001; c.lens = {20005, 18003}; out.push_back(c); }
  // One KV head for a group of 8 (the TMA boxes' head dimension has extent 1); pages of 128
  // slots (several tiles per page); more than 32 splits merged at head_dim 256.
  { Case c; c.num_q_heads = 8; c.num_kv_heads = 1; c.lens = ragged; out.push_back(c); }
  { Case c; c.page_size = 128; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 256; c.variant = DecodeVariant::kSplitK; c.partition = 16; c.sinks = true; c.lens = {600, 33, 1}; out.push_back(c); }
  { Case c; c.variant = DecodeVariant::kSplitK; c.partition = 16; c.lens = ragged; out.push_back(c); }
  { Case c; c.variant = DecodeVariant::kSplitK; c.partition = 48; c.page_size = 3; c.window = 100; c.alibi = true; c.soft_cap = 8.0f; c.lens = ragged; out.push_back(c); }
  // At most 8 splits: the merge takes a warp per (sequence, head) (merge_split_rows_kernel);
  // head_dim 192 and 256 give its second float4 of dims, partly and wholly live.
  { Case c; c.variant = DecodeVariant::kSplitK; c.partition = 512; c.sinks = true; c.alibi = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.q = DType::kF32; c.kv = DType::kF16; c.variant = DecodeVariant::kSplitK; c.partition = 272; c.num_q_heads = 12; c.num_kv_heads = 3; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E4M3; c.head_dim = 192; c.variant = DecodeVariant::kSplitK; c.partition = 128; c.window = 300; c.lens = {600, 33, 1, 1000}; out.push_back(c); }
  { Case c; c.head_dim = 256; c.variant = DecodeVariant::kSplitK; c.partition = 96; c.sinks = true; c.soft_cap = 6.0f; c.lens = {600, 33, 1, 0, 768}; out.push_back(c); }
  { Case c; c.layout = KVLayout::kVllmSplit; c.kv = DType::kF8E5M2; c.head_dim = 80; c.csr = true; c.lens = ragged; out.push_back(c); }
  // 9 to 32 splits (one merge block of the CTA-per-row merge): rows of 32, 24, 10, 2, 1 and 0
  // splits; head_dim 80 with f32 q, soft-cap and ALiBi.
  { Case c; c.variant = DecodeVariant::kSplitK; c.partition = 64; c.sinks = true; c.lens = {2048, 600, 1, 0, 1500, 65}; out.push_back(c); }
  { Case c; c.head_dim = 80; c.q = DType::kF32; c.variant = DecodeVariant::kSplitK; c.partition = 48; c.soft_cap = 5.0f; c.alibi = true; c.lens = {700, 33, 1000}; out.push_back(c); }
  // head_dim 256 on tensor cores (Q's fragments in shared memory): fp8 both ways, HND with
  // variants, GQA 32/8 rows long enough for several page-id chunks.
  { Case c; c.head_dim = 256; c.kv = DType::kF8E4M3; c.q = DType::kF16; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 256; c.kv = DType::kF8E5M2; c.layout = KVLayout::kHND; c.window = 300; c.alibi = true; c.soft_cap = 5.0f; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 256; c.q = DType::kF16; c.kv = DType::kF16; c.num_q_heads = 32; c.num_kv_heads = 8; c.variant = DecodeVariant::kOnePass; c.lens = {16401, 3000}; out.push_back(c); }
  // Head dims between the tensor-core kernels' sizes, zero-padded: into the 64 / 128 / 256
  // kernels, TMA boxes that end past head_dim or lie wholly past it (d192), cp.async chunks past
  // it (page sizes off 16), fp8 both ways, one KV head per query head, split-K with variants.
  { Case c; c.head_dim = 40; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 40; c.q = DType::kF16; c.kv = DType::kF16; c.page_size = 3; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 96; c.num_q_heads = 32; c.num_kv_heads = 8; c.layout = KVLayout::kHND; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 112; c.variant = DecodeVariant::kOnePass; c.lens = {16401, 3000}; out.push_back(c); }
  { Case c; c.head_dim = 80; c.num_q_heads = 4; c.num_kv_heads = 4; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 160; c.num_q_heads = 4; c.num_kv_heads = 4; c.q = DType::kF16; c.kv = DType::kF16; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 80; c.kv = DType::kF8E4M3; c.q = DType::kF16; c.lens = ragged; c.tag = "fp8wide4"; out.push_back(c); }
  { Case c; c.head_dim = 192; c.variant = DecodeVariant::kSplitK; c.partition = 64; c.sinks = true; c.alibi = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 192; c.q = DType::kF16; c.kv = DType::kF16; c.page_size = 3; c.window = 300; c.soft_cap = 5.0f; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 160; c.kv = DType::kF8E5M2; c.layout = KVLayout::kHND; c.per_head_scales = true; c.lens = ragged; out.push_back(c); }
  // vLLM's split layout on the tensor-core kernel (V staged transposed in 16-byte runs of slots):
  // runs that start before a window or a split and end past the sequence, pages of 8 (a tile
  // across two pages) and 32, one KV head per query head, padded head dims, several page-id
  // chunks, split-K with variants.
  { Case c; c.layout = KVLayout::kVllmSplit; c.page_size = 8; c.window = 41; c.lens = ragged; out.push_back(c); }
  { Case c; c.layout = KVLayout::kVllmSplit; c.num_q_heads = 4; c.num_kv_heads = 4; c.q = DType::kF16; c.kv = DType::kF16; c.lens = ragged; out.push_back(c); }
  { Case c; c.layout = KVLayout::kVllmSplit; c.page_size = 32; c.head_dim = 80; c.csr = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.layout = KVLayout::kVllmSplit; c.head_dim = 192; c.variant = DecodeVariant::kSplitK; c.partition = 48; c.sinks = true; c.alibi = true; c.soft_cap = 5.0f; c.lens = ragged; out.push_back(c); }
  { Case c; c.layout = KVLayout::kVllmSplit; c.head_dim = 64; c.num_q_heads = 32; c.num_kv_heads = 8; c.variant = DecodeVariant::kOnePass; c.lens = {16401, 3000}; out.push_back(c); }
  { Case c; c.layout = KVLayout::kVllmSplit; c.head_dim = 256; c.window = 300; c.lens = ragged; out.push_back(c); }
  { Case c; c.layout = KVLayout::kVllmSplit; c.kv = DType::kF8E4M3; c.q = DType::kF16; c.window = 45; c.variant = DecodeVariant::kSplitK; c.partition = 64; c.lens = ragged; out.push_back(c); }
  { Case c; c.layout = KVLayout::kVllmSplit; c.kv = DType::kF8E5M2; c.page_size = 32; c.head_dim = 192; c.per_head_scales = true; c.lens = ragged; out.push_back(c); }
  // Uniform batches of few (sequence, KV head) units whose equal splits hold >= 1024 keys: on a
  // Hopper GPU, with the warps balancing their tiles (ctest decode_cuda_balanced_warp_tiles), the
  // planner gives them one four-warp TMA CTA per SM (e.g. 132 SMs: 16 and 8 splits of 1025 keys,
  // 128 CTAs, merged by a CTA per row and by a warp per row); otherwise two two-warp CTAs per SM.
  { Case c; c.num_q_heads = 32; c.num_kv_heads = 8; c.lens = {16400}; c.tag = "onewave1"; out.push_back(c); }
  { Case c; c.num_q_heads = 32; c.num_kv_heads = 8; c.sinks = true; c.lens = {8200, 8192}; c.tag = "onewave2"; out.push_back(c); }
  // fp8 caches with groups below 4 (MHA, 2, 3), which PAGEDATTN_DECODE_SMALL_GROUP_MMA moves between
  // the CUDA-core and the tensor-core kernel: both dtypes, every layout, head dims 64 / 128 / 256,
  // pages that tiles straddle, split-K with variants, q past f16's range.
  { Case c; c.kv = DType::kF8E4M3; c.num_q_heads = 4; c.num_kv_heads = 4; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E5M2; c.q = DType::kF16; c.num_q_heads = 8; c.num_kv_heads = 4; c.layout = KVLayout::kHND; c.page_size = 3; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E4M3; c.num_q_heads = 12; c.num_kv_heads = 4; c.variant = DecodeVariant::kSplitK; c.partition = 32; c.sinks = true; c.soft_cap = 6.0f; c.alibi = true; c.per_head_scales = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E4M3; c.q = DType::kF16; c.num_q_heads = 4; c.num_kv_heads = 4; c.head_dim = 64; c.page_size = 1; c.lens = {1, 2, 200, 1000}; out.push_back(c); }
  { Case c; c.kv = DType::kF8E5M2; c.num_q_heads = 4; c.num_kv_heads = 4; c.head_dim = 256; c.window = 300; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E4M3; c.num_q_heads = 4; c.num_kv_heads = 4; c.layout = KVLayout::kVllmSplit; c.csr = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E4M3; c.num_q_heads = 8; c.num_kv_heads = 4; c.q_amp = 200000.0f; c.variant = DecodeVariant::kOnePass; c.lens = {16401, 3000}; out.push_back(c); }
  { Case c; c.kv = DType::kF8E5M2; c.num_q_heads = 32; c.num_kv_heads = 32; c.head_dim = 80; c.lens = {2100, 1, 513}; out.push_back(c); }
  // fp8 groups of 4 at head_dim 128 (TMA tiles on Hopper) with more than two KV heads and
  // per-head scales: tiles cut at both ends of a window; HND in pages of 32 with a CSR table and
  // split-K with variants; 32/8 heads in one pass over a row of 4100 keys.
  { Case c; c.kv = DType::kF8E4M3; c.num_q_heads = 16; c.num_kv_heads = 4; c.window = 40; c.per_head_scales = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E5M2; c.num_q_heads = 16; c.num_kv_heads = 4; c.layout = KVLayout::kHND; c.page_size = 32; c.csr = true; c.variant = DecodeVariant::kSplitK; c.partition = 64; c.sinks = true; c.soft_cap = 6.0f; c.alibi = true; c.per_head_scales = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.kv = DType::kF8E4M3; c.num_q_heads = 32; c.num_kv_heads = 8; c.per_head_scales = true; c.variant = DecodeVariant::kOnePass; c.lens = {4100, 2048}; out.push_back(c); }
  // The smallest head dims; f32 q over f32 and fp8 caches.
  { Case c; c.head_dim = 8; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 16; c.kv = DType::kF8E5M2; c.num_q_heads = 8; c.num_kv_heads = 2; c.lens = ragged; out.push_back(c); }
  { Case c; c.head_dim = 32; c.q = DType::kF32; c.kv = DType::kF32; c.variant = DecodeVariant::kSplitK; c.partition = 64; c.lens = ragged; out.push_back(c); }
  { Case c; c.q = DType::kF32; c.kv = DType::kF8E4M3; c.num_q_heads = 16; c.num_kv_heads = 4; c.lens = ragged; out.push_back(c); }
  // Without an LSE output: one pass on the TMA kernel, split-K (the merges), fp8.
  { Case c; c.lse = false; c.variant = DecodeVariant::kOnePass; c.lens = ragged; out.push_back(c); }
  { Case c; c.lse = false; c.variant = DecodeVariant::kSplitK; c.partition = 64; c.sinks = true; c.lens = ragged; out.push_back(c); }
  { Case c; c.lse = false; c.kv = DType::kF8E4M3; c.q = DType::kF16; c.num_q_heads = 32; c.num_kv_heads = 8; c.lens = {16400}; out.push_back(c); }
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
  // Split-K scratch that is too small or misaligned.
  DeviceBuffer scratch(1 << 20);
  const DecodeOptions split{DecodeVariant::kSplitK, 32, &host_table};
  Context small = ctx;
  small.workspace = {static_cast<std::byte*>(scratch.get()), 64};
  expect_error([&] { decode(small, d.q.view, d.cache, d.table, d.params, out_view, {}, split); }, "needs");
  Context shifted = ctx;
  shifted.workspace = {static_cast<std::byte*>(scratch.get()) + 4, scratch.bytes() - 4};
  expect_error([&] { decode(shifted, d.q.view, d.cache, d.table, d.params, out_view, {}, split); }, "16-byte aligned");
  // An output over the cache it reads, and a workspace over an output.
  const TensorView out_over_k(d.k.buffer.get(), DType::kBF16, {S, c.num_q_heads, c.head_dim}, Device::cuda(0));
  expect_error([&] { decode(ctx, d.q.view, d.cache, d.table, d.params, out_over_k, {}, split); }, "out overlaps cache.k");
  Context over_out = ctx;
  over_out.workspace = {static_cast<std::byte*>(out.get()), out.bytes()};
  expect_error([&] { decode(over_out, d.q.view, d.cache, d.table, d.params, out_view, {}, split); },
               "ctx.workspace overlaps out");
}

// Decode of c's single sequence with `options` (its host table filled in here) must throw an
// error mentioning `needle` before it launches anything: out keeps its fill.
void expect_rejected_before_launch(const Case& c, unsigned seed, DecodeOptions options, const char* needle) {
  HostProblem h = build(c, seed);
  DeviceProblem d = to_device(h, params_of(c, h));
  DeviceBuffer out(static_cast<std::size_t>(c.num_q_heads * c.head_dim) * 2);
  test::cuda_ok(cudaMemset(out.get(), 0x5a, out.bytes()), "fill");
  const auto before = out.snapshot();
  const TensorView out_view(out.get(), DType::kBF16, {1, c.num_q_heads, c.head_dim}, Device::cuda(0));
  const PageTable host_table = h.table();
  options.host_table = &host_table;
  test::expect_error_then_sync(
      [&] { decode(Context{Device::cuda(0)}, d.q.view, d.cache, d.table, d.params, out_view, {}, options); }, needle);
  EXPECT_EQ(out.snapshot(), before);
}

// One-token splits of a 65537-token sequence: more splits than grid.y holds.
TEST(CudaDecodeErrors, RejectsMoreSplitsThanTheGridHolds) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  Case c;
  c.head_dim = 8, c.page_size = 1, c.num_q_heads = 2, c.num_kv_heads = 1, c.lens = {65537};
  expect_rejected_before_launch(c, 11, DecodeOptions{DecodeVariant::kSplitK, 1}, "65535 splits");
}

// More query heads than the split merge's grid.y holds: a clear error before anything is
// launched, not a failed launch after the decode kernel ran.
TEST(CudaDecodeErrors, RejectsMoreQueryHeadsThanTheGridHolds) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  Case c;
  c.head_dim = 8, c.page_size = 16, c.num_q_heads = 65536, c.num_kv_heads = 1, c.lens = {64};
  expect_rejected_before_launch(c, 12, DecodeOptions{DecodeVariant::kSplitK, 16}, "at most 65535 query heads");
}

// decode_workspace_bytes: a split plan needs its f32 partial states; exactly that many bytes of
// ctx.workspace run the op, fewer are rejected before anything runs, and a one-pass plan and
// the CPU need none.
TEST(CudaDecodeWorkspace, QueryGivesWhatTheOpNeeds) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  Case c;
  c.lens = {300, 1000, 17};
  HostProblem h = build(c, 9);
  const AttentionParams host_params = params_of(c, h);
  const std::int64_t S = 3, Hq = c.num_q_heads, D = c.head_dim;
  const PageTable host_table = h.table();
  DeviceProblem d = to_device(h, host_params);
  const std::size_t out_bytes = static_cast<std::size_t>(S * Hq * D) * dtype_size(c.q);
  DeviceBuffer out(out_bytes);
  const TensorView out_view(out.get(), c.q, {S, Hq, D}, Device::cuda(0));
  const Context gpu{Device::cuda(0)};
  const DecodeOptions split{DecodeVariant::kSplitK, 64, &host_table};
  const std::size_t need = decode_workspace_bytes(gpu, d.q.view, d.cache, d.table, d.params, out_view, {}, split);
  // 1000 tokens in 64-token partitions: 16 splits of every head's f32 output and LSE.
  EXPECT_EQ(need, static_cast<std::size_t>(S * 16 * Hq * (D + 1)) * sizeof(float));
  EXPECT_EQ(decode_workspace_bytes(gpu, d.q.view, d.cache, d.table, d.params, out_view, {},
                                   DecodeOptions{DecodeVariant::kOnePass, 0, &host_table}),
            0u);
  // Exactly `need` bytes, NaN-poisoned, with guard bytes past them that must stay untouched;
  // the result against the reference.
  constexpr std::size_t kGuard = 4096;
  DeviceBuffer scratch(need + kGuard);
  test::cuda_ok(cudaMemset(scratch.get(), 0xff, scratch.bytes()), "poison");
  Context ctx = gpu;
  ctx.workspace = {static_cast<std::byte*>(scratch.get()), need};
  decode(ctx, d.q.view, d.cache, d.table, d.params, out_view, {}, split);
  test::cuda_ok(cudaDeviceSynchronize(), "decode");
  const std::vector<std::byte> after = scratch.snapshot();
  EXPECT_TRUE(std::all_of(after.begin() + static_cast<std::ptrdiff_t>(need), after.end(),
                          [](std::byte b) { return b == std::byte{0xff}; }))
      << "decode wrote past the " << need << " workspace bytes it asked for";
  std::vector<std::byte> want(out_bytes);
  Context ref = Context::cpu();
  ref.implementation = Implementation::kReference;
  decode(ref, h.q_view, h.cache, host_table, host_params, TensorView(want.data(), c.q, {S, Hq, D}));
  expect_close(to_floats(out.snapshot(), c.q), to_floats(want, c.q), tolerance(c.q), "exact workspace");
  ctx.workspace = {static_cast<std::byte*>(scratch.get()), need - 16};
  test::expect_error_then_sync([&] { decode(ctx, d.q.view, d.cache, d.table, d.params, out_view, {}, split); },
                               "ctx.workspace has");
  std::vector<std::byte> host_out(out_bytes);
  EXPECT_EQ(decode_workspace_bytes(Context::cpu(), h.q_view, h.cache, host_table, host_params,
                                   TensorView(host_out.data(), c.q, {S, Hq, D})),
            0u);
}

// The same inputs give the same bits, call after call (DecodeOptions::deterministic, the
// default), on grids where warps sharing a CTA's tiles at run time would sum different keys
// from call to call: one-wave split GQA rows on the TMA kernel, fp8 on the cp.async one, a
// ragged batch. With deterministic = false the results may move in their last bits only.
TEST(CudaDecodeDeterminism, RepeatedCallsGiveTheSameBits) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<Case> specs(3);
  specs[0].num_q_heads = 32, specs[0].num_kv_heads = 8, specs[0].lens = {8200, 8192};
  specs[1].num_q_heads = 32, specs[1].num_kv_heads = 8, specs[1].kv = DType::kF8E4M3, specs[1].q = DType::kF16;
  specs[1].lens = {16401, 3000};
  specs[2].lens = {0, 1, 97, 2100, 5000, 700, 4096, 33};
  for (const Case& c : specs) {
    SCOPED_TRACE(name_of(c));
    HostProblem h = build(c, 7);
    const AttentionParams host_params = params_of(c, h);
    DeviceProblem d = to_device(h, host_params);
    const std::int64_t S = static_cast<std::int64_t>(c.lens.size());
    const std::size_t out_bytes = static_cast<std::size_t>(S * c.num_q_heads * c.head_dim) * dtype_size(c.q);
    DeviceBuffer out(out_bytes), lse(static_cast<std::size_t>(S * c.num_q_heads) * sizeof(float)),
        scratch(std::size_t{64} << 20);
    Context ctx{Device::cuda(0)};
    ctx.workspace = {static_cast<std::byte*>(scratch.get()), scratch.bytes()};
    const PageTable host_table = h.table();
    auto run = [&](bool deterministic) {
      for (const DeviceBuffer* b : {&out, &lse, &scratch}) test::cuda_ok(cudaMemset(b->get(), 0xff, b->bytes()), "poison");
      DecodeOptions options{DecodeVariant::kAuto, 0, &host_table};
      options.deterministic = deterministic;
      decode(ctx, d.q.view, d.cache, d.table, d.params,
             TensorView(out.get(), c.q, {S, c.num_q_heads, c.head_dim}, Device::cuda(0)),
             TensorView(lse.get(), DType::kF32, {S, c.num_q_heads}, Device::cuda(0)), options);
      test::cuda_ok(cudaDeviceSynchronize(), "decode");
      return std::pair{out.snapshot(), lse.snapshot()};
    };
    const auto first = run(true);
    for (int i = 0; i < 4; ++i) {
      const auto again = run(true);
      EXPECT_TRUE(again.first == first.first) << "output bits changed in call " << i + 2;
      EXPECT_TRUE(again.second == first.second) << "LSE bits changed in call " << i + 2;
    }
    const auto balanced = run(false);
    expect_close(to_floats(balanced.first, c.q), to_floats(first.first, c.q), tolerance(c.q), "deterministic = false");
    test::expect_lse_close(to_floats(balanced.second, DType::kF32), to_floats(first.second, DType::kF32), 1e-3,
                 "deterministic = false, LSE");
  }
}

// A decode captured once in a CUDA graph replays correctly after the lengths change: the
// kernels read lengths from device memory. The plan comes from a host copy with shorter
// lengths than the pages hold; replays run the planned lengths, shorter ones, and longer ones
// (up to the pages: the plan's last split takes the keys past it). Output and LSE are checked
// against the reference, with the outputs and the workspace NaN-poisoned before every replay.
// Configurations: split-K on the TMA kernel (bf16 NHD), the planner's choice over fp8 (the
// cp.async tensor-core kernel; one pass for the planned lengths), one pass over f16 HND with
// sinks, f32 q on the CUDA-core kernel with a window, and the first over a CSR table.
class CudaDecodeGraph : public ::testing::TestWithParam<Case> {};

TEST_P(CudaDecodeGraph, ReplaysWithNewLengths) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();  // c.lens: what the pages hold
  HostProblem h = build(c, 11);
  const AttentionParams host_params = params_of(c, h);
  DeviceProblem d = to_device(h, host_params);
  const std::int64_t S = static_cast<std::int64_t>(c.lens.size()), Hq = c.num_q_heads, D = c.head_dim;
  const std::size_t out_bytes = static_cast<std::size_t>(S * Hq * D) * dtype_size(c.q);
  const std::size_t lse_bytes = static_cast<std::size_t>(S * Hq) * sizeof(float);
  DeviceBuffer out(out_bytes), lse(lse_bytes), workspace(64 << 20);
  const test::Stream stream;
  Context ctx{Device::cuda(0), stream.get()};
  ctx.workspace = {static_cast<std::byte*>(workspace.get()), workspace.bytes()};
  BlockTableData planned = h.bt;
  planned.seq_lens = {700, 1000, 1024, 33};  // with 256-token splits: at most 4 per sequence
  // A CSR table's lengths are its pages per sequence and last_page_len: each replay uploads the
  // CSR of its lengths, indices padded to the capacity the device table was built with.
  auto csr_of = [&](BlockTableData bt) {
    CsrPageTableData csr = to_csr(bt.view(), c.page_size);
    csr.indices.resize(h.csr.indices.size(), -5);
    return csr;
  };
  CsrPageTableData planned_csr = c.csr ? csr_of(planned) : CsrPageTableData{};
  const PageTable host_table = c.csr ? PageTable{planned_csr.view()} : PageTable{planned.view()};
  const TensorView out_view(out.get(), c.q, {S, Hq, D}, Device::cuda(0));
  const TensorView lse_view(lse.get(), DType::kF32, {S, Hq}, Device::cuda(0));
  const test::CapturedGraph graph(stream.get(), [&] {
    decode(ctx, d.q.view, d.cache, d.table, d.params, out_view, lse_view, DecodeOptions{c.variant, c.partition, &host_table});
  });

  for (const std::vector<std::int32_t>& lens : {std::vector<std::int32_t>{700, 1000, 1024, 33},
                                               std::vector<std::int32_t>{5, 1000, 999, 0},
                                               std::vector<std::int32_t>{256, 257, 1, 32},
                                               std::vector<std::int32_t>{700, 1500, 2048, 33}}) {
    SCOPED_TRACE("lengths " + std::to_string(lens[0]) + ", " + std::to_string(lens[1]) + ", " +
                 std::to_string(lens[2]) + ", " + std::to_string(lens[3]));
    h.bt.seq_lens = lens;  // the pages already hold these tokens
    if (c.csr) {
      const CsrPageTableData now = csr_of(h.bt);
      for (auto [dst, src] : {std::pair{&d.a, &now.indptr}, std::pair{&d.b, &now.indices}, std::pair{&d.c, &now.last_page_len}}) {
        test::cuda_ok(cudaMemcpy(dst->buffer.get(), src->data(), src->size() * 4, cudaMemcpyHostToDevice), "csr");
      }
    } else {
      test::cuda_ok(cudaMemcpy(d.b.buffer.get(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice), "lens");
    }
    for (const DeviceBuffer* b : {&out, &lse, &workspace}) test::cuda_ok(cudaMemset(b->get(), 0xff, b->bytes()), "poison");
    graph.replay();
    std::vector<std::byte> want(out_bytes);
    std::vector<float> want_lse(static_cast<std::size_t>(S * Hq)), got_lse(want_lse.size());
    Context ref = Context::cpu();
    ref.implementation = Implementation::kReference;
    decode(ref, h.q_view, h.cache, h.bt.view(), host_params, TensorView(want.data(), c.q, {S, Hq, D}),
           TensorView(want_lse.data(), DType::kF32, {S, Hq}));
    expect_close(to_floats(out.snapshot(), c.q), to_floats(want, c.q), tolerance(c.q), "graph replay");
    lse.download(got_lse.data());
    test::expect_lse_close(got_lse, want_lse, 1e-3, "graph replay, LSE");
  }
}

std::vector<Case> graph_cases() {
  std::vector<Case> out(5);
  for (Case& c : out) c.lens = {700, 1500, 2048, 33};
  out[0].variant = DecodeVariant::kSplitK, out[0].partition = 256;
  out[1].kv = DType::kF8E4M3, out[1].q = DType::kF16, out[1].num_q_heads = 16, out[1].num_kv_heads = 4;
  out[2].layout = KVLayout::kHND, out[2].kv = DType::kF16, out[2].q = DType::kF16, out[2].sinks = true;
  out[2].variant = DecodeVariant::kOnePass;
  out[3].q = DType::kF32, out[3].kv = DType::kF32, out[3].head_dim = 64, out[3].window = 600;
  out[3].variant = DecodeVariant::kSplitK, out[3].partition = 256;
  out[4] = out[0];
  out[4].csr = true;
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaDecodeGraph, ::testing::ValuesIn(graph_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::to_string(info.index) + "_" + name_of(info.param);
                         });

}  // namespace
}  // namespace pagedattn
