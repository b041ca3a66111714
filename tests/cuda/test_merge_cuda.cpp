// CUDA merge_state / merge_states against the CPU ops on the same inputs: every dtype mix,
// head dims from 8 to 512 (and ones that are not a multiple of 8), empty (-inf) states and
// rows, weights that underflow, outputs aliasing an input, strided state layouts, no lse_out.
// The kernel repeats the CPU's arithmetic, so the tolerance is about one unit in the last place.
// Bad input is rejected with nothing written.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <ostream>
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

using test::Twin;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct MergeCase {
  DType a = DType::kF32, b = DType::kF32, out = DType::kF32;  // merge_states: v is `a`
  std::int64_t rows = 37, heads = 5, dim = 128;
  std::int64_t num_states = 0;  // 0: merge_state; else merge_states over this many states
  bool lse_out = true;
  bool alias = false;        // out (and lse_out) is v_a / lse_a, or state 0 of v / lse
  bool state_major = false;  // merge_states: v stored [num_states, rows, heads, dim]
  bool unaligned = false;    // the first input starts one element into its buffer
};

std::string name_of(const MergeCase& c) {
  std::string s = c.num_states == 0 ? "pair" : "states" + std::to_string(c.num_states);
  s += "_" + std::string(to_string(c.a));
  if (c.num_states == 0) s += "_" + std::string(to_string(c.b));
  s += "_out" + std::string(to_string(c.out)) + "_r" + std::to_string(c.rows) + "_h" +
       std::to_string(c.heads) + "_d" + std::to_string(c.dim);
  if (!c.lse_out) s += "_nolse";
  if (c.alias) s += "_alias";
  if (c.state_major) s += "_statemajor";
  if (c.unaligned) s += "_unaligned";
  return test::gtest_name(s);
}
void PrintTo(const MergeCase& c, std::ostream* os) { *os << name_of(c); }

// A tensor in a twin buffer: `shape` viewed with `strides` (elements), `lead` elements in.
struct TwinTensor {
  Twin buf;
  TensorView host, device;
};

TwinTensor make_tensor(DType dt, std::initializer_list<std::int64_t> shape,
                       std::initializer_list<std::int64_t> strides, std::int64_t elems,
                       std::int64_t lead, std::mt19937_64& rng) {
  TwinTensor t;
  t.buf = Twin(static_cast<std::size_t>(lead + elems) * dtype_size(dt));
  t.buf.fill_random(rng);
  t.host = TensorView(t.buf.host.data() + lead * static_cast<std::int64_t>(dtype_size(dt)), dt, shape, strides);
  return t;
}

// Element-wise fill through the view (f32 LSE or a v of any float dtype).
template <class Gen>
void fill(TwinTensor& t, Gen&& gen) {
  const TensorView& v = t.host;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(v.rank()), 0);
  const std::int64_t n = v.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rem = i, off = 0;
    for (int d = v.rank() - 1; d >= 0; --d) {
      idx[static_cast<std::size_t>(d)] = rem % v.size(d);
      rem /= v.size(d);
      off += idx[static_cast<std::size_t>(d)] * v.stride(d);
    }
    store_from_float(v.data(), v.dtype(), off, gen(idx));
  }
  t.buf.upload();
  t.device = t.buf.device_view(t.host);
}

// LSEs: mostly in [-3, 5]; a fifth -inf (empty states); some far below the rest, so their
// weight underflows to a subnormal or zero; row 3 empty in every state.
float random_lse(std::mt19937_64& rng, std::int64_t row) {
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  if (row == 3 || u < 0.2) return -kInf;
  if (u < 0.27) return std::uniform_real_distribution<float>(-130.0f, -85.0f)(rng);
  return std::uniform_real_distribution<float>(-3.0f, 5.0f)(rng);
}

double tolerance(DType t) { return t == DType::kF32 ? 1e-6 : t == DType::kF16 ? 1e-3 : 8e-3; }

// Compares view `host` (the CPU result) with the same view over `device_bytes` (the GPU's).
void expect_close(const TensorView& host, const Twin& twin, const std::vector<std::byte>& device_bytes,
                  double tol, const char* what) {
  const std::ptrdiff_t offset = static_cast<const std::byte*>(host.data()) - twin.host.data();
  const TensorView got = TensorView::rebind(host, const_cast<std::byte*>(device_bytes.data()) + offset, Device::cpu());
  std::int64_t bad = 0, checked = 0;
  std::string first;
  const std::int64_t n0 = host.size(0), n1 = host.size(1), n2 = host.rank() > 2 ? host.size(2) : 1;
  for (std::int64_t i = 0; i < n0; ++i) {
    for (std::int64_t j = 0; j < n1; ++j) {
      for (std::int64_t k = 0; k < n2; ++k) {
        const std::int64_t off = i * host.stride(0) + j * host.stride(1) + (host.rank() > 2 ? k * host.stride(2) : 0);
        const float want = load_as_float(host.data(), host.dtype(), off);
        const float g = load_as_float(got.data(), got.dtype(), off);
        ++checked;
        const bool ok = std::isinf(want) ? g == want : std::fabs(g - want) <= tol * (1.0 + std::fabs(want));
        if (!ok && bad++ == 0) {
          first = "(" + std::to_string(i) + ", " + std::to_string(j) + ", " + std::to_string(k) +
                  "): got " + std::to_string(g) + ", expected " + std::to_string(want);
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << checked << " differ; first at " << first;
}

class CudaMerge : public ::testing::TestWithParam<MergeCase> {};

TEST_P(CudaMerge, MatchesCpu) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  const MergeCase& c = GetParam();
  std::mt19937_64 rng(77);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const std::int64_t R = c.rows, H = c.heads, D = c.dim, lead = c.unaligned ? 1 : 0;
  auto value = [&](const std::vector<std::int64_t>&) { return uni(rng); };
  auto lse_value = [&](const std::vector<std::int64_t>& idx) { return random_lse(rng, idx[0]); };
  const Context gpu{Device::cuda(0)};

  if (c.num_states == 0) {
    TwinTensor va = make_tensor(c.a, {R, H, D}, {H * D, D, 1}, R * H * D, lead, rng);
    TwinTensor vb = make_tensor(c.b, {R, H, D}, {H * D, D, 1}, R * H * D, 0, rng);
    TwinTensor la = make_tensor(DType::kF32, {R, H}, {H, 1}, R * H, 0, rng);
    TwinTensor lb = make_tensor(DType::kF32, {R, H}, {H, 1}, R * H, 0, rng);
    TwinTensor vo = make_tensor(c.out, {R, H, D}, {H * D, D, 1}, R * H * D, 0, rng);
    TwinTensor lo = make_tensor(DType::kF32, {R, H}, {H, 1}, R * H, 0, rng);
    for (TwinTensor* t : {&va, &vb}) fill(*t, value);
    for (TwinTensor* t : {&la, &lb}) fill(*t, lse_value);
    fill(vo, value);  // poison: every element must be written
    fill(lo, value);
    TwinTensor& out = c.alias ? va : vo;
    TwinTensor& lse_out = c.alias ? la : lo;
    const TensorView host_lse_out = c.lse_out ? lse_out.host : TensorView{};
    const TensorView dev_lse_out = c.lse_out ? lse_out.device : TensorView{};
    merge_state(Context::cpu(), va.host, la.host, vb.host, lb.host, out.host, host_lse_out);
    merge_state(gpu, va.device, la.device, vb.device, lb.device, out.device, dev_lse_out);
    test::cuda_ok(cudaDeviceSynchronize(), "merge_state");
    expect_close(out.host, out.buf, out.buf.download(), tolerance(out.host.dtype()), "v_out");
    if (c.lse_out) expect_close(lse_out.host, lse_out.buf, lse_out.buf.download(), 1e-6, "lse_out");
    if (!c.lse_out) {
      EXPECT_TRUE(test::first_difference(lo.buf.download(), lo.buf.host).empty()) << "lse_out written";
    }
    return;
  }
  const std::int64_t S = c.num_states;
  // v [R, S, H, D] viewed over row-major storage, or over [S, R, H, D] storage (state-major).
  TwinTensor v = c.state_major
                     ? make_tensor(c.a, {R, S, H, D}, {H * D, R * H * D, D, 1}, S * R * H * D, lead, rng)
                     : make_tensor(c.a, {R, S, H, D}, {S * H * D, H * D, D, 1}, S * R * H * D, lead, rng);
  TwinTensor lse = c.state_major ? make_tensor(DType::kF32, {R, S, H}, {H, R * H, 1}, S * R * H, 0, rng)
                                 : make_tensor(DType::kF32, {R, S, H}, {S * H, H, 1}, S * R * H, 0, rng);
  TwinTensor vo = make_tensor(c.out, {R, H, D}, {H * D, D, 1}, R * H * D, 0, rng);
  TwinTensor lo = make_tensor(DType::kF32, {R, H}, {H, 1}, R * H, 0, rng);
  fill(v, value);
  fill(lse, lse_value);
  fill(vo, value);
  fill(lo, value);
  TensorView host_out = vo.host, dev_out = vo.device, host_lse_out = lo.host, dev_lse_out = lo.device;
  const Twin* out_twin = &vo.buf;
  const Twin* lse_twin = &lo.buf;
  if (c.alias) {
    host_out = v.host.select(1, 0);
    dev_out = v.device.select(1, 0);
    host_lse_out = lse.host.select(1, 0);
    dev_lse_out = lse.device.select(1, 0);
    out_twin = &v.buf;
    lse_twin = &lse.buf;
  }
  if (!c.lse_out) host_lse_out = dev_lse_out = TensorView{};
  merge_states(Context::cpu(), v.host, lse.host, host_out, host_lse_out);
  merge_states(gpu, v.device, lse.device, dev_out, dev_lse_out);
  test::cuda_ok(cudaDeviceSynchronize(), "merge_states");
  expect_close(host_out, *out_twin, out_twin->download(), tolerance(host_out.dtype()), "v_out");
  if (c.lse_out) {
    expect_close(host_lse_out, *lse_twin, lse_twin->download(), 1e-6, "lse_out");
  } else {
    EXPECT_TRUE(test::first_difference(lo.buf.download(), lo.buf.host).empty()) << "lse_out written";
  }
}

std::vector<MergeCase> merge_cases() {
  std::vector<MergeCase> out;
  const DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (DType a : kTypes)
    for (DType b : kTypes)
      for (DType o : kTypes) out.push_back(MergeCase{a, b, o});
  for (std::int64_t d : {8, 20, 64, 80, 256, 512, 1, 0}) {  // 0: no values, the LSE still merged
    MergeCase c{DType::kBF16, DType::kF32, DType::kBF16};
    c.dim = d;
    out.push_back(c);
  }
  for (DType t : kTypes) {
    MergeCase c{t, DType::kF32, t};
    c.alias = true;  // v_out == v_a, lse_out == lse_a
    out.push_back(c);
    c.alias = false;
    c.lse_out = false;
    out.push_back(c);
    c.lse_out = true;
    c.unaligned = true;
    c.dim = 80;
    out.push_back(c);
  }
  { MergeCase c; c.rows = 1000; c.heads = 32; c.dim = 64; c.a = c.b = c.out = DType::kBF16; out.push_back(c); }
  { MergeCase c; c.rows = 0; out.push_back(c); }
  for (std::int64_t s : {1, 3, 7}) {
    for (DType t : kTypes) {
      MergeCase c{t, t, t};
      c.num_states = s;
      out.push_back(c);
    }
    MergeCase c{DType::kF16, DType::kF16, DType::kF32};
    c.num_states = s;
    c.state_major = true;
    out.push_back(c);
    c.out = DType::kF16;
    c.alias = true;
    out.push_back(c);
    c.alias = false;
    c.lse_out = false;
    c.dim = 20;
    out.push_back(c);
    c.lse_out = true;
    c.unaligned = true;
    c.dim = 128;
    out.push_back(c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaMerge, ::testing::ValuesIn(merge_cases()),
                         [](const ::testing::TestParamInfo<MergeCase>& info) {
                           return std::to_string(info.index) + "_" + name_of(info.param);
                         });

TEST(CudaMergeErrors, RejectsBadInputAndWritesNothing) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(8);
  const std::int64_t R = 4, H = 3, D = 64;
  TwinTensor va = make_tensor(DType::kF32, {R, H, D}, {H * D, D, 1}, R * H * D, 0, rng);
  TwinTensor la = make_tensor(DType::kF32, {R, H}, {H, 1}, R * H, 0, rng);
  TwinTensor vo = make_tensor(DType::kF32, {R, H, D}, {H * D, D, 1}, R * H * D, 0, rng);
  for (TwinTensor* t : {&va, &la, &vo}) fill(*t, [](const std::vector<std::int64_t>&) { return 0.25f; });
  const Context gpu{Device::cuda(0)};
  auto expect_rejected = [&](auto&& call, const char* needle) {
    const auto before = vo.buf.download();
    test::expect_error_then_sync(call, needle);
    EXPECT_TRUE(test::first_difference(vo.buf.download(), before).empty()) << needle << ": output written";
  };
  expect_rejected([&] { merge_state(gpu, va.device, la.device, va.host, la.device, vo.device); }, "v_b is on cpu");
  expect_rejected([&] { merge_state(gpu, va.device, la.device, va.device, la.host, vo.device); }, "lse_b is on cpu");
  const TensorView fewer_heads(va.device.data(), DType::kF32, {R, 2, D}, Device::cuda(0));
  expect_rejected([&] { merge_state(gpu, va.device, la.device, fewer_heads, la.device, vo.device); },
                  "v_b dimension 1 (num_heads) is 2");
  const TensorView strided(va.device.data(), DType::kF32, {R, H, D / 2}, {H * D, D, 2}, Device::cuda(0));
  const TensorView out_half(vo.device.data(), DType::kF32, {R, H, D / 2}, Device::cuda(0));
  expect_rejected([&] { merge_state(gpu, strided, la.device, strided, la.device, out_half); },
                  "v_a must be contiguous along head_dim");
  const TensorView states(va.device.data(), DType::kF32, {R, 1, H, D}, Device::cuda(0));
  const TensorView states_lse(la.device.data(), DType::kF32, {R, 2, H}, Device::cuda(0));
  expect_rejected([&] { merge_states(gpu, states, states_lse, vo.device); }, "lse dimension 1 (num_states) is 2");
  expect_rejected([&] { merge_states(gpu, states, la.device, vo.device); }, "lse has rank 2");
  expect_rejected([&] { merge_states(gpu, states, TensorView(la.device.data(), DType::kF32, {R, 1, H}, Device::cuda(0)), vo.host); },
                  "v_out is on cpu");
}

// merge_states and merge_state captured once in a CUDA graph replay with whatever states the
// captured buffers hold: nothing is read on the host, so every replay merges the new values.
TEST(CudaMergeGraph, ReplaysWithNewStates) {
  if (!test::gpu_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const std::int64_t R = 9, S = 5, H = 4, D = 128;
  auto value = [&](const std::vector<std::int64_t>&) { return uni(rng); };
  auto lse_value = [&](const std::vector<std::int64_t>& idx) { return random_lse(rng, idx[0]); };
  TwinTensor v = make_tensor(DType::kBF16, {R, S, H, D}, {S * H * D, H * D, D, 1}, R * S * H * D, 0, rng);
  TwinTensor lse = make_tensor(DType::kF32, {R, S, H}, {S * H, H, 1}, R * S * H, 0, rng);
  TwinTensor vb = make_tensor(DType::kF32, {R, H, D}, {H * D, D, 1}, R * H * D, 0, rng);
  TwinTensor lb = make_tensor(DType::kF32, {R, H}, {H, 1}, R * H, 0, rng);
  TwinTensor vo = make_tensor(DType::kBF16, {R, H, D}, {H * D, D, 1}, R * H * D, 0, rng);
  TwinTensor lo = make_tensor(DType::kF32, {R, H}, {H, 1}, R * H, 0, rng);
  TwinTensor vp = make_tensor(DType::kF32, {R, H, D}, {H * D, D, 1}, R * H * D, 0, rng);
  TwinTensor lp = make_tensor(DType::kF32, {R, H}, {H, 1}, R * H, 0, rng);
  for (TwinTensor* t : {&v, &vb, &vo, &vp}) fill(*t, value);
  for (TwinTensor* t : {&lse, &lb, &lo, &lp}) fill(*t, lse_value);
  const test::Stream stream;
  const Context gpu{Device::cuda(0), stream.get()};
  // The states' merge, then that merged with one more state (its output feeds the pair merge).
  const test::CapturedGraph graph(stream.get(), [&] {
    merge_states(gpu, v.device, lse.device, vo.device, lo.device);
    merge_state(gpu, vo.device, lo.device, vb.device, lb.device, vp.device, lp.device);
  });
  EXPECT_TRUE(test::first_difference(vp.buf.download(), vp.buf.host).empty()) << "capturing must not run the op";

  for (int round = 0; round < 3; ++round) {
    for (TwinTensor* t : {&v, &vb}) fill(*t, value);  // new states, uploaded into the captured buffers
    for (TwinTensor* t : {&lse, &lb}) fill(*t, lse_value);
    for (TwinTensor* t : {&vo, &vp}) fill(*t, value);  // and poisoned outputs
    for (TwinTensor* t : {&lo, &lp}) fill(*t, value);
    graph.replay();
    merge_states(Context::cpu(), v.host, lse.host, vo.host, lo.host);
    merge_state(Context::cpu(), vo.host, lo.host, vb.host, lb.host, vp.host, lp.host);
    SCOPED_TRACE("round " + std::to_string(round));
    expect_close(vo.host, vo.buf, vo.buf.download(), tolerance(DType::kBF16), "merge_states v_out");
    expect_close(lo.host, lo.buf, lo.buf.download(), 1e-6, "merge_states lse_out");
    // The pair merge read the GPU's bf16 merge, the CPU's its own: equal within bf16 rounding.
    expect_close(vp.host, vp.buf, vp.buf.download(), tolerance(DType::kBF16), "merge_state v_out");
    expect_close(lp.host, lp.buf, lp.buf.download(), 1e-6, "merge_state lse_out");
  }
}

}  // namespace
}  // namespace pagedattn
