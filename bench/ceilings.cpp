// The CPU ceilings the benchmarks are compared with, measured in the same run:
//   - streaming read bandwidth: a 1 GiB f32 buffer summed with SIMD by all threads;
//   - fp32 FMA peak: independent chains of fused multiply-adds held in registers.
// Both use the SIMD target Highway's runtime dispatch picks, like the kernels.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ceilings.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace pagedattn::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of p[0, n): 8 independent vector accumulators so the adds never limit the load rate.
double SumFloats(const float* HWY_RESTRICT p, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  auto a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  std::int64_t i = 0;
  for (; i + 8 * N <= n; i += 8 * N) {
    a0 = hn::Add(a0, hn::LoadU(df, p + i));
    a1 = hn::Add(a1, hn::LoadU(df, p + i + N));
    a2 = hn::Add(a2, hn::LoadU(df, p + i + 2 * N));
    a3 = hn::Add(a3, hn::LoadU(df, p + i + 3 * N));
    a4 = hn::Add(a4, hn::LoadU(df, p + i + 4 * N));
    a5 = hn::Add(a5, hn::LoadU(df, p + i + 5 * N));
    a6 = hn::Add(a6, hn::LoadU(df, p + i + 6 * N));
    a7 = hn::Add(a7, hn::LoadU(df, p + i + 7 * N));
  }
  const auto sum = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)),
                           hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  double total = hn::GetLane(hn::SumOfLanes(df, sum));
  for (; i < n; ++i) total += p[i];
  return total;
}

// Runs `iters` steps of 16 independent FMA chains; returns their sum (so nothing is elided)
// and the number of flops performed (2 per lane per FMA) in *flops.
double FmaChains(std::int64_t iters, float seed, double* flops) {
  constexpr int kChains = 16;
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  V acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = hn::Set(df, seed + static_cast<float>(c));
  const V mul = hn::Set(df, 0.9999999f), add = hn::Set(df, 1e-7f);
  for (std::int64_t it = 0; it < iters; ++it) {
    for (int c = 0; c < kChains; ++c) acc[c] = hn::MulAdd(acc[c], mul, add);
  }
  V sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = hn::Add(sum, acc[c]);
  *flops = 2.0 * static_cast<double>(iters) * kChains * static_cast<double>(hn::Lanes(df));
  return hn::GetLane(hn::SumOfLanes(df, sum));
}

}  // namespace pagedattn::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>

#include <chrono>
#include <vector>

#include "bench_common.h"
#include "benchmarks.h"
#include "huge_pages.h"

namespace pagedattn::bench {
HWY_EXPORT(SumFloats);
HWY_EXPORT(FmaChains);

namespace {
using Clock = std::chrono::steady_clock;
constexpr std::int64_t kStreamBytes = std::int64_t{1} << 30;
constexpr int kStreamPasses = 7;
constexpr std::int64_t kFmaIters = std::int64_t{1} << 23;
constexpr int kFmaRuns = 5;

int threads_of(int num_threads) { return num_threads > 0 ? num_threads : omp_get_max_threads(); }
}  // namespace

double measure_stream_read_gbps(int num_threads) {
  const int threads = threads_of(num_threads);
  const std::int64_t n = kStreamBytes / static_cast<std::int64_t>(sizeof(float));
  auto buffer = allocate_huge<float>(static_cast<std::size_t>(n));  // like the decode's pools
  // Each thread first touches (and later reads) the same static chunk.
  fill_random(buffer.get(), DType::kF32, n, 42, -1.0, 1.0, threads);
  const std::int64_t chunk = (n / threads + 63) / 64 * 64;
  std::vector<double> gbps;
  volatile double sink = 0.0;
  for (int pass = 0; pass <= kStreamPasses; ++pass) {  // pass 0 warms up
    double total = 0.0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const std::int64_t begin = std::min(n, omp_get_thread_num() * chunk);
      const std::int64_t end = std::min(n, begin + chunk);
      total += HWY_DYNAMIC_DISPATCH(SumFloats)(buffer.get() + begin, end - begin);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    sink = sink + total;
    if (pass > 0) gbps.push_back(static_cast<double>(kStreamBytes) / seconds / 1e9);
  }
  return median(gbps);
}

double measure_fp32_fma_peak_gflops(int num_threads) {
  const int threads = threads_of(num_threads);
  std::vector<double> gflops;
  volatile double sink = 0.0;
  for (int run = 0; run <= kFmaRuns; ++run) {  // run 0 warms up (and raises the clock)
    double flops = 0.0, total = 0.0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops, total)
    {
      double f = 0.0;
      total += HWY_DYNAMIC_DISPATCH(FmaChains)(kFmaIters, static_cast<float>(omp_get_thread_num()), &f);
      flops += f;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    sink = sink + total;
    if (run > 0) gflops.push_back(flops / seconds / 1e9);
  }
  return median(gflops);
}

}  // namespace pagedattn::bench
#endif  // HWY_ONCE
