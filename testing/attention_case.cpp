#include "attention_case.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <sstream>
#include <stdexcept>

#include "compare.h"
#include "paged_fixture.h"
#include "pagedattn/ops.h"

namespace pagedattn::testing {

namespace {
std::int64_t pages_for(std::int64_t len, std::int64_t page_size) {
  return (len + page_size - 1) / page_size;
}

void check_case(const AttentionCase& c) {
  auto fail = [&](const std::string& why) { throw std::invalid_argument("bad case: " + why); };
  if (c.page_size < 1) fail("page_size < 1");
  if (c.num_kv_heads < 1 || c.num_q_heads % c.num_kv_heads != 0) fail("heads do not divide");
  for (std::int64_t len : c.kv_lens) {
    if (len < 0) fail("negative kv_len");
    if (c.op == Op::kCascade && len < c.shared_prefix) fail("kv_len below shared_prefix");
  }
  if (c.op == Op::kPrefill) {
    if (c.q_lens.size() != c.kv_lens.size()) fail("q_lens and kv_lens differ in length");
    for (std::size_t s = 0; s < c.q_lens.size(); ++s) {
      if (c.q_lens[s] < 0 || c.q_lens[s] > c.kv_lens[s]) fail("q_len outside [0, kv_len]");
    }
  }
}
}  // namespace

// ---- CaseFixture -------------------------------------------------------------------------

CaseFixture::CaseFixture(const AttentionCase& c) : c_(c), rng_(c.seed) {
  check_case(c);
  const auto S = static_cast<std::int64_t>(c.kv_lens.size());
  const std::int64_t ps = c.page_size, Hq = c.num_q_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  const bool cascade = c.op == Op::kCascade;
  const std::int64_t prefix = cascade ? c.shared_prefix : 0;

  std::int64_t needed = pages_for(prefix, ps);
  for (std::int64_t len : c.kv_lens) needed += pages_for(len - prefix, ps);
  const CacheSpec spec{c.layout, c.kv_dtype, needed + 2 + needed / 8, ps, Hkv, D, c.stacked_kv,
                       c.per_head_scales};
  cache_ = std::make_unique<PagedCache>(spec, rng_);

  // Dense K/V per sequence; a cascade's sequences all start with the same physical prefix pages.
  std::vector<DenseKV> dense(static_cast<std::size_t>(S));
  const DenseKV shared = cache_->random_tokens(prefix, rng_);
  const std::vector<std::int32_t> prefix_pages = cache_->take_pages(pages_for(prefix, ps));
  cache_->write(prefix_pages, shared);
  std::vector<std::vector<std::int32_t>> rows;
  std::vector<std::int64_t> row_lens;
  for (std::int64_t s = 0; s < S; ++s) {
    const std::int64_t len = c.kv_lens[static_cast<std::size_t>(s)] - prefix;
    rows.push_back(cache_->take_pages(pages_for(len, ps)));
    row_lens.push_back(len);
    const DenseKV own = cache_->random_tokens(len, rng_);
    cache_->write(rows.back(), own);
    dense[static_cast<std::size_t>(s)] = cascade ? DenseKV::concat(shared, own) : own;
  }
  if (cascade) {
    tables_.emplace_back(std::vector<std::vector<std::int32_t>>{prefix_pages},
                         std::vector<std::int64_t>{prefix}, ps, c.table, rng_);
    seq_to_row_.assign(static_cast<std::size_t>(S), 0);
  }
  tables_.emplace_back(std::move(rows), std::move(row_lens), ps, c.table, rng_);

  // Queries: one per sequence, or q_lens[s] for prefill.
  std::vector<std::int64_t> n_q(static_cast<std::size_t>(S), 1);
  if (c.op == Op::kPrefill) n_q = c.q_lens;
  qo_indptr_.push_back(0);
  for (std::int64_t n : n_q) qo_indptr_.push_back(qo_indptr_.back() + static_cast<std::int32_t>(n));
  const std::int64_t T = qo_indptr_.back();
  const std::int64_t pad = c.strided_q ? 8 : 0;
  q_ = HostTensor::make(c.q_dtype, {T, Hq, D}, pad);
  out_ = HostTensor::make(c.output_dtype(), {T, Hq, D}, pad);
  if (c.with_lse) lse_ = HostTensor::make(DType::kF32, {T, Hq}, c.strided_q ? 3 : 0);
  // Queries in [-4, 4] give logits with a standard deviation near 1: the softmax is neither
  // uniform (which would hide weighting bugs) nor one-hot.
  const std::vector<double> q = q_.fill_random(rng_, -4.0, 4.0);

  ReferenceParams ref;
  params_.scale = c.seed % 2 == 1 ? 1.3f / std::sqrt(static_cast<float>(D)) : 0.0f;
  ref.scale = params_.scale > 0 ? params_.scale : 1.0f / std::sqrt(static_cast<float>(D));
  params_.causal = c.op == Op::kPrefill ? c.causal : true;
  ref.causal = params_.causal;
  params_.window_left = ref.window_left = c.window_left;
  params_.logits_soft_cap = c.soft_cap;
  ref.soft_cap = c.soft_cap;
  if (c.alibi) {
    for (std::int64_t h = 0; h < Hq; ++h) {
      alibi_.push_back(std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(Hq)));
    }
    params_.alibi_slopes = TensorView(alibi_.data(), DType::kF32, {Hq});
    ref.alibi_slopes = alibi_;
  }
  if (c.sinks) {
    for (std::int64_t h = 0; h < Hq; ++h) sinks_.push_back(static_cast<float>(rng_.uniform(-1.0, 3.0)));
    params_.sinks = TensorView(sinks_.data(), DType::kF32, {Hq});
    ref.sinks = sinks_;
  }

  expected_out_.assign(static_cast<std::size_t>(T * Hq * D), 0.0);
  expected_lse_.assign(static_cast<std::size_t>(T * Hq), 0.0);
  for (std::int64_t s = 0; s < S; ++s) {
    const auto q0 = static_cast<std::size_t>(qo_indptr_[static_cast<std::size_t>(s)]);
    const std::int64_t n = n_q[static_cast<std::size_t>(s)];
    const auto elems = static_cast<std::size_t>(n * Hq * D);
    reference_sequence(std::span(q).subspan(q0 * static_cast<std::size_t>(Hq * D), elems), n,
                       dense[static_cast<std::size_t>(s)], Hq, Hkv, D, ref,
                       std::span(expected_out_).subspan(q0 * static_cast<std::size_t>(Hq * D), elems),
                       std::span(expected_lse_).subspan(q0 * static_cast<std::size_t>(Hq),
                                                        static_cast<std::size_t>(n * Hq)));
  }
  cache_before_ = cache_->snapshot();
}

void CaseFixture::run(const Context& ctx) {
  if (ctx.device.type == DeviceType::kCUDA) return run_on_gpu(ctx);
  const OpViews host = host_views();
  run_op(ctx, host, host);
}

OpViews CaseFixture::host_views() {
  OpViews v;
  v.q = q_.view;
  v.out = out_.view;
  v.lse = c_.with_lse ? lse_.view : TensorView{};
  v.qo_indptr = TensorView(qo_indptr_.data(), DType::kI32, {static_cast<std::int64_t>(qo_indptr_.size())});
  v.seq_to_row = TensorView(seq_to_row_.data(), DType::kI32, {static_cast<std::int64_t>(seq_to_row_.size())});
  v.kv = cache_->kv();
  for (HostTable& t : tables_) v.tables.push_back(t.view());
  v.params = params_;
  return v;
}

void CaseFixture::run_op(const Context& ctx, const OpViews& v, const OpViews& host) const {
  switch (c_.op) {
    case Op::kDecode: {
      DecodeOptions options{DecodeVariant::kOnePass, 0, &host.tables[0]};
      decode(ctx, v.q, v.kv, v.tables[0], v.params, v.out, v.lse, options);
      return;
    }
    case Op::kDecodeSplitK: {
      // Small partitions so that most sequences split; every third seed leaves it to the planner.
      const std::int64_t ps = c_.page_size;
      const auto partition = static_cast<int>(ps * std::max<std::int64_t>(1, 40 / ps));
      DecodeOptions options{DecodeVariant::kSplitK, c_.seed % 3 == 0 ? 0 : partition, &host.tables[0]};
      decode(ctx, v.q, v.kv, v.tables[0], v.params, v.out, v.lse, options);
      return;
    }
    case Op::kPrefill:
      prefill(ctx, v.q, v.qo_indptr, v.kv, v.tables[0], v.params, v.out, v.lse,
              PrefillOptions{&host.tables[0], host.qo_indptr});
      return;
    case Op::kCascade: {
      const CascadeLevel levels[2] = {{v.tables[0], v.seq_to_row}, {v.tables[1], TensorView{}}};
      const CascadeLevel host_levels[2] = {{host.tables[0], host.seq_to_row}, {host.tables[1], TensorView{}}};
      cascade_decode(ctx, v.q, v.kv, levels, v.params, v.out, v.lse, CascadeOptions{host_levels});
      return;
    }
  }
}

std::vector<double> CaseFixture::lse() const {
  return c_.with_lse ? read_values(lse_.view) : std::vector<double>{};
}

std::vector<std::byte> CaseFixture::result_bytes() const {
  std::vector<std::byte> bytes(out_.storage);
  bytes.insert(bytes.end(), lse_.storage.begin(), lse_.storage.end());
  return bytes;
}

// ---- run_case / describe -----------------------------------------------------------------

CaseResult run_case(const AttentionCase& c, const Context& ctx) {
  CaseResult r;
  try {
    CaseFixture f(c);
    f.run(ctx);
    // The kernels compute in q's precision (e.g. bf16 probabilities into the p.v on the bf16
    // products) and round to the output's: the coarser of the two dtypes' tolerances.
    const Tolerance q_tol = tolerance_for(c.q_dtype), out_tol = tolerance_for(c.output_dtype());
    const Tolerance tol{std::max(q_tol.atol, out_tol.atol), std::max(q_tol.rtol, out_tol.rtol)};
    const Comparison out = compare(f.output(), f.expected_output(), tol, "out");
    r.max_abs_error = out.max_abs_error;
    r.nmse = out.nmse;
    std::vector<std::string> problems;
    if (!out.passed) problems.push_back(out.message);
    if (c.with_lse) {
      const Comparison lse = compare_lse(f.lse(), f.expected_lse());
      r.max_lse_error = lse.max_abs_error;
      if (!lse.passed) problems.push_back(lse.message);
    }
    if (!f.padding_intact()) problems.push_back("the op wrote into the padding between out's rows");
    if (!f.cache_intact()) problems.push_back("the op modified the KV cache");
    r.passed = problems.empty();
    for (const std::string& p : problems) r.message += (r.message.empty() ? "" : "; ") + p;
  } catch (const std::exception& e) {
    r.passed = false;
    r.message = std::string("threw: ") + e.what();
  }
  return r;
}

std::string describe(const AttentionCase& c) {
  static constexpr const char* kOpNames[] = {"decode", "decode-splitk", "prefill", "cascade"};
  std::ostringstream s;
  auto list = [&](const char* label, const std::vector<std::int64_t>& v) {
    s << ' ' << label << '[';
    for (std::size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
    s << ']';
  };
  s << kOpNames[static_cast<int>(c.op)] << ' ' << to_string(c.layout) << ' '
    << to_string(c.q_dtype) << '/' << to_string(c.kv_dtype);
  if (c.out_dtype) s << "->" << to_string(*c.out_dtype);
  if (is_fp8(c.kv_dtype)) s << (c.per_head_scales ? "-perhead" : "-pertensor");
  s << " ps" << c.page_size << " h" << c.num_q_heads << '/' << c.num_kv_heads << " d"
    << c.head_dim;
  list("lens", c.kv_lens);
  if (c.op == Op::kPrefill) list("q", c.q_lens);
  if (c.op == Op::kCascade) s << " prefix" << c.shared_prefix;
  if (c.table == TableFormat::kCsr) s << " csr";
  if (c.stacked_kv) s << " stacked";
  if (c.strided_q) s << " strided";
  if (c.op == Op::kPrefill && !c.causal) s << " noncausal";
  if (c.window_left >= 0) s << " win" << c.window_left;
  if (c.soft_cap > 0) s << " cap" << c.soft_cap;
  if (c.alibi) s << " alibi";
  if (c.sinks) s << " sinks";
  if (!c.with_lse) s << " nolse";
  s << " seed" << c.seed;
  return s.str();
}

}  // namespace pagedattn::testing
