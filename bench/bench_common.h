// Shared pieces of the CPU benchmarks: timing, random data, the JSON record of BENCHMARKS.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedattn/dtype.h"
#include "pagedattn/kv_cache.h"

namespace pagedattn::bench {

// Wall-clock time of one call, in microseconds.
struct Timing {
  double median_us = 0.0;
  double min_us = 0.0;
};

// Calls fn(i) `warmup` times, then `iterations` timed times (i counts all calls from 0, so a
// benchmark can rotate between inputs); returns the median and minimum of the timed calls.
Timing time_calls(const std::function<void(int)>& fn, int warmup, int iterations);

// Median of `values` (copied; the mean of the two middle ones for an even count).
double median(std::vector<double> values);

// Fills `count` elements of `dtype` at `data` with uniform values in [lo, hi], rounded to the
// dtype. Deterministic for a seed whatever the thread count (element i depends only on seed, i).
void fill_random(void* data, DType dtype, std::int64_t count, std::uint64_t seed,
                 double lo = -1.0, double hi = 1.0, int num_threads = 0);

// "AMD EPYC 9654 96-Core Processor" (the first model name in /proc/cpuinfo), or "cpu".
std::string cpu_device_name();

// Bytes of KV a CPU benchmark rotates through between calls: at least `floor` and twice the
// last-level cache, so that no call finds its pages still cached from the ones before.
std::int64_t kv_rotation_bytes(std::int64_t floor);

// The case-describing fields every record has: op, backend ("cpu"), device, dtype, kv_dtype,
// layout, page_size, head counts, head_dim, batch, seq_lens_desc, plus num_threads and
// simd_target.
struct RecordCase {
  std::string op;
  DType dtype = DType::kBF16;
  DType kv_dtype = DType::kBF16;
  KVLayout layout = KVLayout::kNHD;
  std::int64_t page_size = 16;
  std::int64_t num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  std::int64_t batch = 0;
  std::string seq_lens_desc;
  int num_threads = 0;
};
nlohmann::json make_record(const RecordCase& c, const Timing& t);

// Adds achieved_gbps (bytes / median time / 1e9), ceiling_gbps and ratio_to_ceiling.
void add_bandwidth(nlohmann::json& record, double bytes, double ceiling_gbps);
// Adds achieved_tflops (flops / median time / 1e12), ceiling_tflops and ratio_to_ceiling.
void add_throughput(nlohmann::json& record, double flops, double ceiling_tflops);

}  // namespace pagedattn::bench
