// Helpers of the GPU benchmarks: error checks, owning device buffers, random fills and the
// timing of captured graphs.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "pagedattn/dtype.h"
#include "pagedattn/error.h"
#include "pagedattn/kv_cache.h"
#include "cuda_handles.h"
#include "page_ids.h"

namespace pagedattn::bench {

inline void ok(cudaError_t err, const char* what) { testing::cuda_check(err, what); }

struct Gpu {
  void* ptr = nullptr;
  explicit Gpu(std::size_t bytes) { ok(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 1)), "cudaMalloc"); }
  ~Gpu() { cudaFree(ptr); }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
};

// Streams, events and graphs are owned by the shared test-support handles.
using testing::CapturedGraph;
using testing::Events;
using testing::Stream;

// Fills a device buffer with random 16-bit floats in [-1, 1] (or fp8 bytes) on the host side
// in slices, so the values are real data (never zeros) whatever the dtype.
inline void fill_random(void* dst, std::size_t bytes, DType dtype, std::uint64_t seed) {
  constexpr std::size_t kSlice = 64 << 20;
  std::vector<std::byte> host(std::min(bytes, kSlice));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const std::size_t esize = dtype_size(dtype);
  for (std::size_t i = 0; i < host.size() / esize; ++i) {
    store_from_float(host.data(), dtype, static_cast<std::int64_t>(i), uni(rng));
  }
  for (std::size_t off = 0; off < bytes; off += host.size()) {
    ok(cudaMemcpy(static_cast<std::byte*>(dst) + off, host.data(), std::min(host.size(), bytes - off),
                  cudaMemcpyHostToDevice), "fill");
  }
}

// A paged K/V pool on the GPU filled with random values, and its views.
struct RandomCache {
  Gpu k, v;
  PagedKV views;
  RandomCache(const KVCacheSpec& spec, int device)
      : k(static_cast<std::size_t>(spec.bytes_per_tensor())), v(static_cast<std::size_t>(spec.bytes_per_tensor())) {
    fill_random(k.ptr, static_cast<std::size_t>(spec.bytes_per_tensor()), spec.dtype, 1);
    fill_random(v.ptr, static_cast<std::size_t>(spec.bytes_per_tensor()), spec.dtype, 2);
    views = spec.make_views(k.ptr, v.ptr, Device::cuda(device));
  }
};

// The seed of the page order every CUDA benchmark and the read probe use, so that their tables
// over one pool size name the same pages in the same order.
inline constexpr std::uint64_t kPageOrderSeed = 7;

// Per-replay times (µs) of a captured graph, after `warmup` replays and, with warmup_ms > 0,
// as many more as fill that many milliseconds: compute-bound kernels run the GPU into its
// power limit within ~100 ms, and a timing taken partly before that depends on what ran
// before it; a sustained warm-up times every kernel at the clock it keeps.
inline std::vector<double> time_graph(cudaGraphExec_t exec, cudaStream_t stream, int warmup, int iterations,
                                      double warmup_ms = 0) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup; ++i) ok(cudaGraphLaunch(exec, stream), "warm-up");
  while (warmup_ms > 0) {
    ok(cudaStreamSynchronize(stream), "sync");
    if (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() >= warmup_ms) break;
    for (int i = 0; i < 8; ++i) ok(cudaGraphLaunch(exec, stream), "warm-up");
  }
  const Events events(static_cast<std::size_t>(iterations) + 1);
  ok(cudaEventRecord(events[0], stream), "record");
  for (int i = 0; i < iterations; ++i) {
    ok(cudaGraphLaunch(exec, stream), "replay");
    ok(cudaEventRecord(events[static_cast<std::size_t>(i) + 1], stream), "record");
  }
  ok(cudaStreamSynchronize(stream), "sync");
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, events[static_cast<std::size_t>(i)], events[static_cast<std::size_t>(i) + 1]), "elapsed");
    us.push_back(ms * 1e3);
  }
  return us;
}

// Per-replay times (µs) of what `record` launches on `stream`, captured once in a CUDA graph
// (so the host work of the call, e.g. an op's checks, stays outside the timed region).
template <class F>
std::vector<double> time_captured(cudaStream_t stream, F&& record, int warmup, int iterations, double warmup_ms = 0) {
  const CapturedGraph graph(stream, std::forward<F>(record));
  return time_graph(graph.exec(), stream, warmup, iterations, warmup_ms);
}

// Per-call times (µs) of `call` run directly on `stream`, between events recorded around each
// call: the host work of the call counts whenever the GPU waits for it.
template <class F>
std::vector<double> time_calls(cudaStream_t stream, F&& call, int warmup, int iterations) {
  for (int i = 0; i < warmup; ++i) call();
  const Events events(2 * static_cast<std::size_t>(iterations));
  for (std::size_t i = 0; i < events.size(); i += 2) {
    ok(cudaEventRecord(events[i], stream), "record");
    call();
    ok(cudaEventRecord(events[i + 1], stream), "record");
  }
  ok(cudaStreamSynchronize(stream), "sync");
  std::vector<double> us;
  for (std::size_t i = 0; i < events.size(); i += 2) {
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, events[i], events[i + 1]), "elapsed");
    us.push_back(ms * 1e3);
  }
  return us;
}

}  // namespace pagedattn::bench
