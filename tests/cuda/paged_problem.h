// Test helpers for the CUDA attention ops: a random paged problem on the host (shuffled page
// ids, NaN-poisoned unused pages, garbage in unused table entries), its device mirror, and the
// tolerance check against the CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "compare.h"
#include "device_buffer.h"
#include "pagedattn/ops.h"

namespace pagedattn::test {

struct ProblemSpec {
  KVLayout layout = KVLayout::kNHD;
  DType kv = DType::kBF16;
  DType q = DType::kBF16;
  std::int64_t head_dim = 128, page_size = 16, num_q_heads = 8, num_kv_heads = 2;
  std::vector<std::int64_t> lens = {1, 17, 300};
  bool csr = false;
  int window = -1;
  float soft_cap = 0.0f;
  bool alibi = false, sinks = false, per_head_scales = false;
  // q's magnitude; the logit scale is divided by it, so that the logits stay as with 1. Past
  // f16's range (65504; with a bf16 q) it checks that kernels computing in f16 bring q into
  // range first.
  float q_amp = 1.0f;
};

// The spec's dimensions as a name fragment (layout, dtypes, head_dim, page size, heads, table
// format, variants).
inline std::string spec_name(const ProblemSpec& c) {
  std::string s = std::string(to_string(c.layout)) + "_" + std::string(to_string(c.kv)) + "_q" +
                  std::string(to_string(c.q)) + "_d" + std::to_string(c.head_dim) + "_p" +
                  std::to_string(c.page_size) + "_h" + std::to_string(c.num_q_heads) + "x" +
                  std::to_string(c.num_kv_heads) + (c.csr ? "_csr" : "_bt");
  if (c.window >= 0) s += "_win" + std::to_string(c.window);
  if (c.soft_cap > 0) s += "_cap";
  if (c.alibi) s += "_alibi";
  if (c.sinks) s += "_sinks";
  if (c.per_head_scales) s += "_headscale";
  if (c.q_amp != 1.0f) s += "_qamp" + std::to_string(static_cast<long long>(c.q_amp));
  return s;
}

// The suite's per-dtype tolerance (atol = rtol; testing/compare.h).
inline double tolerance(DType out) { return testing::tolerance_for(out).rtol; }

inline std::vector<float> to_floats(const std::vector<std::byte>& bytes, DType t) {
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

inline HostProblem build(const ProblemSpec& c, std::uint64_t seed, std::int64_t q_tokens = -1) {
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
  const std::int64_t T = q_tokens < 0 ? S : q_tokens;  // decode: one query per sequence
  h.q.resize(static_cast<std::size_t>(T * c.num_q_heads * c.head_dim) * dtype_size(c.q));
  for (std::int64_t i = 0; i < T * c.num_q_heads * c.head_dim; ++i) store_from_float(h.q.data(), c.q, i, uni(rng) * c.q_amp);
  h.q_view = TensorView(h.q.data(), c.q, {T, c.num_q_heads, c.head_dim});
  for (std::int64_t i = 0; i < c.num_q_heads; ++i) {
    h.alibi.push_back(-0.05f * static_cast<float>(i + 1));
    h.sinks.push_back(uni(rng) * 2.0f);
  }
  return h;
}

inline AttentionParams params_of(const ProblemSpec& c, HostProblem& h) {
  AttentionParams prm;
  prm.window_left = c.window;
  prm.logits_soft_cap = c.soft_cap;
  if (c.q_amp != 1.0f) prm.scale = 1.0f / (std::sqrt(static_cast<float>(c.head_dim)) * c.q_amp);
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

inline DeviceProblem to_device(HostProblem& h, const AttentionParams& host_params) {
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

// A result against its expected values through the suite's comparator (testing/compare.h):
// NaN / Inf classes, |got - want| <= tol (1 + |want|) per element, and the NMSE bound, which
// catches an error spread over every element below the per-element bound (on long rows the
// outputs shrink towards 0, and a wrong V range could hide under the per-element bound).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                         const char* what) {
  ASSERT_EQ(got.size(), want.size());
  const std::vector<double> g(got.begin(), got.end()), w(want.begin(), want.end());
  const testing::Comparison r = testing::compare(g, w, testing::Tolerance{tol, tol}, what);
  EXPECT_TRUE(r.passed) << r.message;
}

// LSEs (natural log, f32): per element within tol (1 + |want|), -inf matched exactly. No NMSE
// stage: an LSE's error grows with its magnitude (q far past f16's range over fp8 caches gives
// LSEs of 10^5), and the per-element bound is already tight relative to it.
inline void expect_lse_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
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

}  // namespace pagedattn::test
