// CUDA prefill / append against the CPU reference on the same cache bytes: NHD, HND and vLLM's
// split layout, both page-table formats, f32/bf16/f16/fp8 caches (f32 q too), head dims from 8
// to 256, page sizes, group sizes, variants, ragged batches with empty, single-token,
// full-prefill and append sequences; bad input rejected with nothing written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cuda/page_tensor_map.h"
#include "cuda/prefill.h"
#include "device_buffer.h"
#include "graph_capture.h"
#include "expect_error.h"
#include "paged_problem.h"
#include "test_name.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn {
namespace {

using test::DeviceBuffer;

struct Case : test::ProblemSpec {
  std::vector<std::int64_t> queries;  // per sequence, at most its length; empty: all of it
  bool causal = true;
  std::optional<DType> out;  // the output's dtype; q's when unset
  DType out_dtype() const { return out.value_or(q); }
};

std::string name_of(const Case& c) {
  const std::string out = c.out ? "_out" + std::string(to_string(*c.out)) : "";
  return test::gtest_name(test::spec_name(c) + (c.causal ? "" : "_noncausal") + out);
}

// A problem, its reference output and the CUDA op's output on a device mirror of it.
struct PrefillRun {
  std::vector<std::int32_t> indptr;
  std::vector<float> want, got, want_lse, got_lse;
};

PrefillRun run_case(const Case& c) {
  PrefillRun run;
  run.indptr.push_back(0);
  for (std::size_t s = 0; s < c.lens.size(); ++s) {
    const std::int64_t n_q = c.queries.empty() ? c.lens[s] : c.queries[s];
    run.indptr.push_back(run.indptr.back() + static_cast<std::int32_t>(n_q));
  }
  const std::int64_t S = static_cast<std::int64_t>(c.lens.size()), T = run.indptr.back();
  test::HostProblem h = test::build(c, 42, T);
  AttentionParams host_params = test::params_of(c, h);
  host_params.causal = c.causal;
  const TensorView host_indptr(run.indptr.data(), DType::kI32, {S + 1});
  const std::size_t out_bytes = static_cast<std::size_t>(T * c.num_q_heads * c.head_dim) * dtype_size(c.out_dtype());

  std::vector<std::byte> want(out_bytes);
  run.want_lse.resize(static_cast<std::size_t>(T * c.num_q_heads));
  Context ref = Context::cpu();
  ref.implementation = Implementation::kReference;
  const PageTable host_table = h.table();
  prefill(ref, h.q_view, host_indptr, h.cache, host_table, host_params,
          TensorView(want.data(), c.out_dtype(), {T, c.num_q_heads, c.head_dim}),
          TensorView(run.want_lse.data(), DType::kF32, {T, c.num_q_heads}));

  test::DeviceProblem d = test::to_device(h, host_params);
  test::Mirrored indptr = test::mirror(host_indptr);
  DeviceBuffer out(std::max<std::size_t>(out_bytes, 1)), lse(std::max<std::size_t>(run.want_lse.size() * 4, 4));
  test::cuda_ok(cudaMemset(out.get(), 0xff, out.bytes()), "poison");  // NaN: every element must be written
  const Context ctx{Device::cuda(0)};
  prefill(ctx, d.q.view, indptr.view, d.cache, d.table, d.params,
          TensorView(out.get(), c.out_dtype(), {T, c.num_q_heads, c.head_dim}, Device::cuda(0)),
          TensorView(lse.get(), DType::kF32, {T, c.num_q_heads}, Device::cuda(0)),
          PrefillOptions{&host_table, host_indptr});
  test::cuda_ok(cudaDeviceSynchronize(), "prefill");
  run.want = test::to_floats(want, c.out_dtype());
  std::vector<std::byte> got = out.snapshot();
  got.resize(out_bytes);
  run.got = test::to_floats(got, c.out_dtype());
  run.got_lse.resize(run.want_lse.size());
  if (!run.got_lse.empty()) test::cuda_ok(cudaMemcpy(run.got_lse.data(), lse.get(), run.got_lse.size() * 4, cudaMemcpyDeviceToHost), "lse");
  return run;
}

void expect_matches_reference(const Case& c) {
  const PrefillRun run = run_case(c);
  test::expect_close(run.got, run.want, std::max(test::tolerance(c.q), test::tolerance(c.out_dtype())), "output");
  test::expect_lse_close(run.got_lse, run.want_lse, 1e-3, "lse");
}

class CudaPrefill : public ::testing::TestWithParam<Case> {};

// Sets an environment variable of the kernel choice for the scope's lifetime (restores it
// afterwards).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name_)) saved_ = old;
    setenv(name_, value, 1);
  }
  ~ScopedEnv() {
    if (saved_) setenv(name_, saved_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};
struct ScopedKernelChoice : ScopedEnv {
  explicit ScopedKernelChoice(const char* value) : ScopedEnv("PAGEDATTN_PREFILL_KERNEL", value) {}
};

// The kernel the device picks: on Hopper, the wgmma kernel for bf16 / f16 caches.
TEST_P(CudaPrefill, MatchesReference) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  expect_matches_reference(GetParam());
}

// The Hopper kernel with every tile gathered by cp.async (no TMA page boxes: the path of page
// sizes that do not cut 128-key tiles into whole 8-row swizzle atoms).
TEST_P(CudaPrefill, MatchesReferenceWithoutPageBoxes) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const ScopedEnv gather("PAGEDATTN_PREFILL_TMA", "0");
  expect_matches_reference(GetParam());
}

// The portable mma.sync kernel, which Hopper otherwise uses only for vLLM's split layout with
// pages that hold no whole 8-slot runs (or fp8 V transposed).
TEST_P(CudaPrefill, MatchesReferenceOnMmaSyncKernel) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const ScopedKernelChoice mma("mma");
  expect_matches_reference(GetParam());
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // Empty, single-token, a page +- 1, full prefills and appends of a few tokens onto long KV.
  const std::vector<std::int64_t> lens = {0, 1, 15, 17, 200, 300, 700, 1100};
  const std::vector<std::int64_t> queries = {0, 1, 15, 3, 200, 1, 37, 130};
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit}) {
    for (DType kv : {DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2}) {
      Case c;
      c.layout = layout;
      c.kv = kv;
      c.q = kv == DType::kF16 ? DType::kF16 : DType::kBF16;
      c.lens = lens;
      c.queries = queries;
      out.push_back(c);
    }
  }
  for (std::int64_t d : {64, 128, 256}) {
    for (std::int64_t ps : {1, 3, 8, 16, 32, 64, 128}) {
      Case c;
      c.head_dim = d;
      c.page_size = ps;
      c.lens = {1, ps + 1, 200, 333};
      c.queries = {1, ps + 1, 200, 100};
      out.push_back(c);
    }
  }
  // Head dims between the kernels' 64 / 128 / 256 run zero-padded on the next one; 256 has its
  // own shape (one m-tile per warp, 32-key tiles).
  for (std::int64_t d : {8, 40, 80, 96, 136, 192, 256}) {
    Case c;
    c.head_dim = d;
    c.num_q_heads = 8;
    c.num_kv_heads = 2;
    c.lens = {1, 17, 200, 333};
    c.queries = {1, 17, 200, 100};
    out.push_back(c);
  }
  for (auto [hq, hkv] : {std::pair{4, 4}, std::pair{8, 4}, std::pair{10, 2}, std::pair{32, 8}, std::pair{40, 2}, std::pair{12, 4}}) {
    Case c;
    c.num_q_heads = hq;
    c.num_kv_heads = hkv;
    c.lens = {90, 260};
    c.queries = {90, 40};
    out.push_back(c);
  }
  auto with = [&](auto&& set) {
    Case c;
    c.lens = lens;
    c.queries = queries;
    set(c);
    out.push_back(c);
  };
  with([](Case& c) { c.csr = true; });
  with([](Case& c) { c.window = 40; });
  with([](Case& c) { c.window = 0; });
  with([](Case& c) { c.soft_cap = 5.0f; });
  with([](Case& c) { c.alibi = true; });
  with([](Case& c) { c.sinks = true; });
  with([](Case& c) { c.causal = false; });
  // An output dtype other than q's (the kernels' element-wise store instead of pair stores).
  with([](Case& c) { c.out = DType::kF32; });
  with([](Case& c) { c.q = DType::kF16; c.kv = DType::kF16; c.out = DType::kBF16; c.window = 64; });
  with([](Case& c) { c.num_q_heads = 40; c.num_kv_heads = 2; c.sinks = true; c.alibi = true; c.window = 100; });
  with([](Case& c) { c.kv = DType::kF8E4M3; c.per_head_scales = true; c.soft_cap = 6.0f; c.alibi = true; });
  with([](Case& c) { c.kv = DType::kF8E5M2; c.q = DType::kF16; c.head_dim = 64; c.layout = KVLayout::kHND; c.csr = true; });
  with([](Case& c) { c.head_dim = 256; c.kv = DType::kF8E4M3; c.layout = KVLayout::kHND; c.soft_cap = 6.0f; c.alibi = true; });
  with([](Case& c) { c.head_dim = 80; c.kv = DType::kF8E5M2; c.q = DType::kF16; c.window = 40; c.sinks = true; });
  with([](Case& c) { c.head_dim = 256; c.page_size = 3; c.causal = false; c.csr = true; c.out = DType::kF32; });
  // vLLM's split layout: V tiles transposed, copied as runs of slots where pages hold whole runs
  // (16-bit: 8 slots, fp8: 16), key by key otherwise.
  for (std::int64_t ps : {1, 3, 8, 16, 32}) {
    with([&](Case& c) { c.layout = KVLayout::kVllmSplit; c.page_size = ps; });
  }
  with([](Case& c) { c.layout = KVLayout::kVllmSplit; c.kv = DType::kF8E4M3; c.page_size = 8; c.window = 40; });
  with([](Case& c) { c.layout = KVLayout::kVllmSplit; c.kv = DType::kF8E5M2; c.q = DType::kF16; c.head_dim = 80; c.csr = true; });
  with([](Case& c) { c.layout = KVLayout::kVllmSplit; c.head_dim = 256; c.soft_cap = 5.0f; c.sinks = true; });
  with([](Case& c) { c.layout = KVLayout::kVllmSplit; c.head_dim = 40; c.q = DType::kF16; c.kv = DType::kF16; c.causal = false; });
  // 16-bit vLLM caches on the Hopper kernel (V tiles transposed): windows starting mid-group,
  // sequences ending mid-group, padded head dims, variants, the 256 shape's two dim passes.
  with([](Case& c) { c.layout = KVLayout::kVllmSplit; c.window = 41; c.sinks = true; });
  with([](Case& c) { c.layout = KVLayout::kVllmSplit; c.page_size = 8; c.head_dim = 80; c.alibi = true; c.soft_cap = 7.0f; });
  with([](Case& c) { c.layout = KVLayout::kVllmSplit; c.page_size = 32; c.head_dim = 192; c.csr = true; c.window = 77; });
  with([](Case& c) { c.layout = KVLayout::kVllmSplit; c.head_dim = 64; c.q = DType::kF16; c.kv = DType::kF16; c.out = DType::kF32; });
  // Long enough to stage page ids in several chunks (1024 pages at a time), page size 1.
  with([](Case& c) { c.page_size = 1; c.lens = {2500, 40}; c.queries = {300, 40}; });
  // GQA 32/8 over many 128-key tiles (the Hopper kernel's three-stage ring wraps several times):
  // a full prefill, an append, a chunk in the middle; causal, non-causal, windowed, f16, HND.
  auto long_gqa = [&](auto&& set) {
    with([&](Case& c) {
      c.num_q_heads = 32;
      c.num_kv_heads = 8;
      c.lens = {1000, 2100, 513};
      c.queries = {1000, 129, 257};
      set(c);
    });
  };
  long_gqa([](Case&) {});
  long_gqa([](Case& c) { c.causal = false; });
  long_gqa([](Case& c) { c.window = 300; c.sinks = true; });
  long_gqa([](Case& c) { c.kv = DType::kF16; c.q = DType::kF16; c.layout = KVLayout::kHND; c.csr = true; });
  long_gqa([](Case& c) { c.soft_cap = 20.0f; c.alibi = true; });
  long_gqa([](Case& c) { c.head_dim = 256; });
  long_gqa([](Case& c) { c.layout = KVLayout::kVllmSplit; });
  long_gqa([](Case& c) { c.layout = KVLayout::kVllmSplit; c.head_dim = 256; c.causal = false; });
  long_gqa([](Case& c) { c.layout = KVLayout::kVllmSplit; c.window = 300; c.page_size = 8; });
  long_gqa([](Case& c) { c.head_dim = 80; c.kv = DType::kF16; c.q = DType::kF16; c.window = 300; });
  // fp8 caches on the Hopper kernel (rows landing raw, as TMA page boxes or gathered, widened by
  // its producer into a two-stage f16 ring; one raw stage at head_dim 256): the ring wraps many
  // times, pages of 3 (gathered), 8, 16 and 128 slots, dims padded in the boxes, scales per head,
  // q past f16's range (brought into it by a power of two).
  long_gqa([](Case& c) { c.kv = DType::kF8E5M2; c.page_size = 8; c.head_dim = 256; c.layout = KVLayout::kHND; });
  long_gqa([](Case& c) { c.kv = DType::kF8E4M3; c.page_size = 128; c.head_dim = 80; c.causal = false; });
  long_gqa([](Case& c) { c.kv = DType::kF8E4M3; });
  long_gqa([](Case& c) { c.kv = DType::kF8E5M2; c.q = DType::kF16; c.layout = KVLayout::kHND; c.causal = false; c.per_head_scales = true; });
  long_gqa([](Case& c) { c.kv = DType::kF8E4M3; c.head_dim = 256; c.window = 300; });
  long_gqa([](Case& c) { c.kv = DType::kF8E4M3; c.head_dim = 64; c.page_size = 3; c.csr = true; });
  long_gqa([](Case& c) { c.kv = DType::kF8E4M3; c.q_amp = 200000.0f; c.sinks = true; });
  with([](Case& c) { c.kv = DType::kF8E5M2; c.page_size = 1; c.head_dim = 96; c.out = DType::kF32; });
  // The same q range on the mma.sync kernel (fp8 in vLLM's layout), which scales per warp.
  with([](Case& c) { c.kv = DType::kF8E4M3; c.q_amp = 100000.0f; c.layout = KVLayout::kVllmSplit; c.page_size = 16; });
  // What the tensor-core kernels do not take runs as one CUDA-core decode row per query token
  // (prefill_by_rows.cu): f32 q over every cache dtype, a 16-bit cache of the other 16-bit
  // dtype, fp8 at a head_dim that is not a multiple of 16; layouts, formats and variants.
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2}) {
    with([&](Case& c) { c.q = DType::kF32; c.kv = kv; });
  }
  with([](Case& c) { c.q = DType::kBF16; c.kv = DType::kF16; });
  with([](Case& c) { c.q = DType::kF16; c.kv = DType::kBF16; c.out = DType::kF32; c.layout = KVLayout::kVllmSplit; });
  with([](Case& c) { c.head_dim = 72; c.kv = DType::kF8E4M3; c.per_head_scales = true; });
  with([](Case& c) { c.q = DType::kF32; c.kv = DType::kF32; c.layout = KVLayout::kVllmSplit; c.page_size = 3; c.csr = true; });
  with([](Case& c) { c.q = DType::kF32; c.kv = DType::kF32; c.layout = KVLayout::kHND; c.window = 40; c.sinks = true; });
  with([](Case& c) { c.q = DType::kF32; c.kv = DType::kF32; c.soft_cap = 5.0f; c.alibi = true; c.out = DType::kBF16; });
  with([](Case& c) { c.q = DType::kF32; c.kv = DType::kF32; c.causal = false; c.head_dim = 256; c.page_size = 1; });
  with([](Case& c) { c.q = DType::kF32; c.kv = DType::kF32; c.head_dim = 40; c.num_q_heads = 40; c.num_kv_heads = 8; });
  long_gqa([](Case& c) { c.q = DType::kF32; c.kv = DType::kF32; });
  long_gqa([](Case& c) { c.q = DType::kF32; c.kv = DType::kBF16; c.causal = false; c.window = 300; });
  // More query tokens than one grid's 65535 rows (launched in chunks): 4100 sequences of 16.
  with([](Case& c) {
    c.q = DType::kF32;
    c.kv = DType::kF32;
    c.num_q_heads = 2;
    c.num_kv_heads = 1;
    c.head_dim = 8;
    c.lens = std::vector<std::int64_t>(4100, 16);
    c.queries = std::vector<std::int64_t>(4100, 16);
    c.lens[7] = 40;
  });
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaPrefill, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::to_string(info.index) + "_" + name_of(info.param);
                         });

// The kernel choice itself: on compute capability 9.0, bf16 / f16 caches of q's dtype at
// any head_dim go to the Hopper kernel (128-key tiles, 64 at head_dim 256), vLLM's split layout
// too where its pages hold whole 8-slot runs of V, and fp8 caches of K and V rows; fp8 in vLLM's
// split layout, other vLLM pages, misaligned q rows and PAGEDATTN_PREFILL_KERNEL=mma go to mma.sync (64-key tiles, 32 at head_dim 256), as does every
// other device.
TEST(CudaPrefillKernelChoice, HopperKernelWhereItApplies) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  int major = 0, minor = 0;
  test::cuda_ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "major");
  test::cuda_ok(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), "minor");
  const bool hopper = major == 9 && minor == 0;
  detail::AttentionProblem p;
  p.num_q_heads = 32, p.num_kv_heads = 8, p.head_dim = 128;
  p.qo.q_dtype = p.kv.dtype = DType::kBF16;
  p.qo.q_token_stride = 32 * 128, p.qo.q_head_stride = 128;
  p.kv.num_pages = 1000, p.kv.page_size = 16, p.kv.num_kv_heads = 8, p.kv.head_dim = 128;
  for (detail::KVTensorAccess* t : {&p.kv.k, &p.kv.v}) {
    t->page_stride = 16 * 8 * 128, t->token_stride = 8 * 128, t->head_stride = 128, t->chunk_len = 128;
  }
  const cuda::PrefillGeometry g = cuda::prefill_geometry(p, 0);
  EXPECT_EQ(g.hopper, hopper);
  EXPECT_EQ(g.tile_keys, hopper ? 128 : 64);
  EXPECT_GE(g.ctas_per_sm, 1);
  auto expect_portable = [&](detail::AttentionProblem q, const char* why) {
    EXPECT_FALSE(cuda::prefill_geometry(q, 0).hopper) << why;
  };
  { auto q = p; q.qo.q_dtype = q.kv.dtype = DType::kF16; EXPECT_EQ(cuda::prefill_geometry(q, 0).hopper, hopper); }
  {
    auto q = p;  // fp8 rows are widened by the Hopper kernel's producer, in tiles of the same keys
    q.kv.dtype = DType::kF8E4M3;
    const cuda::PrefillGeometry g8 = cuda::prefill_geometry(q, 0);
    EXPECT_EQ(g8.hopper, hopper) << "fp8 cache";
    EXPECT_EQ(g8.tile_keys, hopper ? 128 : 64) << "fp8 cache";
    q.qo.q_dtype = DType::kF16, q.kv.dtype = DType::kF8E5M2;
    EXPECT_EQ(cuda::prefill_geometry(q, 0).hopper, hopper) << "fp8 e5m2 cache, f16 q";
  }
  {
    auto q = p;
    q.head_dim = q.kv.head_dim = q.kv.k.chunk_len = q.kv.v.chunk_len = 80;
    EXPECT_EQ(cuda::prefill_geometry(q, 0).hopper, hopper) << "head_dim 80";
  }
  {
    auto q = p;
    q.head_dim = q.kv.head_dim = q.kv.k.chunk_len = q.kv.v.chunk_len = 256;
    const cuda::PrefillGeometry g256 = cuda::prefill_geometry(q, 0);
    EXPECT_EQ(g256.hopper, hopper);
    EXPECT_EQ(g256.tile_keys, hopper ? 64 : 32);
    EXPECT_EQ(g256.rows_per_cta, hopper ? 128 : 64);
  }
  { auto q = p; q.qo.q_head_stride = 132; expect_portable(q, "q rows not 16-byte aligned"); }
  {
    auto q = p;  // vLLM's split layout: K [pages, heads, D / 8, 16, 8], V [pages, heads, D, 16]
    for (detail::KVTensorAccess* t : {&q.kv.k, &q.kv.v}) t->page_stride = 8 * 128 * 16, t->head_stride = 128 * 16;
    q.kv.k.token_stride = 8, q.kv.k.chunk_len = 8, q.kv.k.chunk_stride = 16 * 8;
    q.kv.v.token_stride = 1, q.kv.v.elem_stride = 16;
    EXPECT_EQ(cuda::prefill_geometry(q, 0).hopper, hopper) << "vLLM's split layout (V tiles transposed)";
    auto q3 = q;  // pages of 3 slots hold no whole 8-slot runs of V
    q3.kv.page_size = 3, q3.kv.v.elem_stride = 3, q3.kv.k.chunk_stride = 3 * 8;
    for (detail::KVTensorAccess* t : {&q3.kv.k, &q3.kv.v}) t->page_stride = 8 * 128 * 3, t->head_stride = 128 * 3;
    expect_portable(q3, "vLLM's split layout, page size 3");
    auto q8 = q;  // fp8: K in chunks of 16 dims, V transposed; the Hopper kernel widens rows only
    q8.kv.dtype = DType::kF8E4M3, q8.kv.k.token_stride = 16, q8.kv.k.chunk_len = 16, q8.kv.k.chunk_stride = 16 * 16;
    expect_portable(q8, "vLLM's split layout, fp8 cache");
  }
  {
    const ScopedKernelChoice mma("mma");
    expect_portable(p, "PAGEDATTN_PREFILL_KERNEL=mma");
  }
}

// fp8 caches' raw page boxes (UINT8, unswizzled rows of the Hopper prefill kernel's dims: 128
// for head dims up to 128, 256 past it): the driver must take them for NHD and HND, dims padded
// in the box, pages of 8 to 128 slots. Were it to refuse, the kernel would gather every tile,
// correct and slower, and no reference case would notice.
TEST(CudaPrefillKernelChoice, Fp8RawPageBoxesEncode) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  constexpr std::int64_t kPages = 64, kHeads = 8;
  DeviceBuffer k(kPages * 128 * kHeads * 256), v(k.bytes());
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND}) {
    for (std::int64_t d : {64, 80, 128, 256}) {
      for (std::int64_t P : {8, 16, 128}) {
        detail::KVCacheAccess kv;
        kv.dtype = DType::kF8E4M3;
        kv.num_pages = kPages, kv.page_size = P, kv.num_kv_heads = kHeads, kv.head_dim = d;
        for (auto [t, data] : {std::pair{&kv.k, k.get()}, std::pair{&kv.v, v.get()}}) {
          t->data = static_cast<std::byte*>(data);
          t->page_stride = P * kHeads * d, t->chunk_len = d;
          t->token_stride = layout == KVLayout::kNHD ? kHeads * d : d;
          t->head_stride = layout == KVLayout::kNHD ? d : P * d;
        }
        cuda::KVPageBoxes boxes;
        EXPECT_TRUE(cuda::encode_kv_page_boxes(kv, cuda::prefill_kernel_dims(d), static_cast<int>(P), boxes))
            << to_string(layout) << " head_dim " << d << " page " << P;
      }
    }
  }
}

// Two sequences of 40 and 70 tokens of KV with 10 and 20 queries of case c's kind, on the GPU.
struct SmallPrefill {
  explicit SmallPrefill(Case c_in)
      : c(with_lens(std::move(c_in))),
        h(test::build(c, 5, 30)),
        host_params(test::params_of(c, h)),
        d(test::to_device(h, host_params)),
        host_indptr(indptr.data(), DType::kI32, {3}),
        dev_indptr(test::mirror(host_indptr)),
        out(static_cast<std::size_t>(30 * c.num_q_heads * c.head_dim) * dtype_size(c.q)),
        host_table(h.table()) {}
  static Case with_lens(Case c) {
    c.lens = {40, 70};
    return c;
  }
  TensorView out_view() const { return TensorView(out.get(), c.q, {30, c.num_q_heads, c.head_dim}, Device::cuda(0)); }

  Case c;
  std::vector<std::int32_t> indptr = {0, 10, 30};
  test::HostProblem h;
  AttentionParams host_params;
  test::DeviceProblem d;
  TensorView host_indptr;
  test::Mirrored dev_indptr;
  DeviceBuffer out;
  PageTable host_table;
};

// Missing host copies and a workspace too small are rejected before anything runs.
TEST(CudaPrefillErrors, RejectsBadOrUnsupportedInputAndWritesNothing) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  auto check = [](Case c, const char* needle, bool drop_options) {
    SmallPrefill f(std::move(c));
    test::cuda_ok(cudaMemset(f.out.get(), 0x5a, f.out.bytes()), "fill");
    const auto before = f.out.snapshot();
    const PrefillOptions options = drop_options ? PrefillOptions{} : PrefillOptions{&f.host_table, f.host_indptr};
    DeviceBuffer small_workspace(16);
    Context ctx{Device::cuda(0)};
    ctx.workspace = {static_cast<std::byte*>(small_workspace.get()), 16};
    test::expect_error_then_sync([&] {
      prefill(ctx, f.d.q.view, f.dev_indptr.view, f.d.cache, f.d.table, f.d.params, f.out_view(), {}, options);
    }, needle);
    EXPECT_EQ(f.out.snapshot(), before) << needle;
  };
  check(Case{}, "host_qo_indptr", true);
  // The per-token path needs 12 bytes of workspace per query token: a given one must hold them.
  { Case c; c.q = DType::kF32; c.kv = DType::kF32; check(c, "ctx.workspace has 16 bytes, prefill needs 360", false); }
}

// prefill_workspace_bytes: the per-token path (f32 q) needs 12 bytes per query token, the tensor
// cores none.
TEST(CudaPrefillWorkspace, QueryGivesWhatTheOpNeeds) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  for (DType t : {DType::kBF16, DType::kF32}) {
    Case c;
    c.q = c.kv = t;
    const SmallPrefill f(c);
    const std::size_t need = prefill_workspace_bytes(Context{Device::cuda(0)}, f.d.q.view, f.dev_indptr.view, f.d.cache,
                                                     f.d.table, f.d.params, f.out_view(), {},
                                                     PrefillOptions{&f.host_table, f.host_indptr});
    EXPECT_EQ(need, t == DType::kF32 ? 30u * 12u : 0u) << to_string(t);
  }
}

// A prefill captured once in a CUDA graph replays correctly after qo_indptr and the lengths
// change within the bounds it was sized for (the same token count, no sequence with more
// queries than planned): the kernel reads both from device memory.
class CudaPrefillGraph : public ::testing::TestWithParam<DType> {};

TEST_P(CudaPrefillGraph, ReplaysWithNewQueriesAndLengths) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  Case c;
  c.q = c.kv = GetParam();
  c.lens = {300, 700, 129};
  const std::int64_t S = 3, T = 293;
  test::HostProblem h = test::build(c, 13, T);
  const AttentionParams host_params = test::params_of(c, h);
  test::DeviceProblem d = test::to_device(h, host_params);
  std::vector<std::int32_t> indptr = {0, 100, 164, 293};  // at most 129 queries per sequence
  const TensorView host_indptr(indptr.data(), DType::kI32, {S + 1});
  test::Mirrored dev_indptr = test::mirror(host_indptr);
  const std::size_t out_bytes = static_cast<std::size_t>(T * c.num_q_heads * c.head_dim) * dtype_size(c.q);
  DeviceBuffer out(out_bytes);
  const test::Stream stream;
  const Context ctx{Device::cuda(0), stream.get()};
  const PageTable host_table = h.table();  // sized for these lengths and queries
  const TensorView out_view(out.get(), c.q, {T, c.num_q_heads, c.head_dim}, Device::cuda(0));
  const test::CapturedGraph graph(stream.get(), [&] {
    prefill(ctx, d.q.view, dev_indptr.view, d.cache, d.table, d.params, out_view, {},
            PrefillOptions{&host_table, host_indptr});
  });

  struct Step {
    std::vector<std::int32_t> indptr, lens;
  };
  for (const Step& step : {Step{{0, 100, 164, 293}, {300, 700, 129}}, Step{{0, 129, 229, 293}, {300, 700, 129}},
                           Step{{0, 64, 164, 293}, {250, 100, 129}}}) {
    h.bt.seq_lens = step.lens;
    test::cuda_ok(cudaMemcpy(dev_indptr.buffer.get(), step.indptr.data(), step.indptr.size() * 4, cudaMemcpyHostToDevice), "indptr");
    test::cuda_ok(cudaMemcpy(d.b.buffer.get(), step.lens.data(), step.lens.size() * 4, cudaMemcpyHostToDevice), "lens");
    test::cuda_ok(cudaMemset(out.get(), 0xff, out_bytes), "poison");
    graph.replay();
    std::vector<std::byte> want(out_bytes);
    Context ref = Context::cpu();
    ref.implementation = Implementation::kReference;
    prefill(ref, h.q_view, TensorView(const_cast<std::int32_t*>(step.indptr.data()), DType::kI32, {S + 1}), h.cache,
            h.bt.view(), host_params, TensorView(want.data(), c.q, {T, c.num_q_heads, c.head_dim}));
    test::expect_close(test::to_floats(out.snapshot(), c.q), test::to_floats(want, c.q), test::tolerance(c.q),
                       "graph replay");
  }
}

// bf16: the tensor-core kernels; f32: one CUDA-core decode row per query token, whose rows are
// mapped on the device from qo_indptr and the lengths.
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaPrefillGraph, ::testing::Values(DType::kBF16, DType::kF32),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace pagedattn
