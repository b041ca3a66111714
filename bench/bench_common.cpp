#include "bench_common.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string_view>
#include <vector>

#include "pagedattn/system_info.h"

namespace pagedattn::bench {

namespace {
// splitmix64: a good 64-bit mix of (seed, index), so random fills parallelise deterministically.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

Timing time_calls(const std::function<void(int)>& fn, int warmup, int iterations) {
  using Clock = std::chrono::steady_clock;
  int call = 0;
  for (int i = 0; i < warmup; ++i) fn(call++);
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(std::max(1, iterations)));
  for (int i = 0; i < std::max(1, iterations); ++i) {
    const auto t0 = Clock::now();
    fn(call++);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return {median(us), *std::min_element(us.begin(), us.end())};
}

void fill_random(void* data, DType dtype, std::int64_t count, std::uint64_t seed, double lo,
                 double hi, int num_threads) {
  const std::uint64_t base = mix(seed);
  const int threads = num_threads > 0 ? num_threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t i = 0; i < count; ++i) {
    const double u = static_cast<double>(mix(base ^ static_cast<std::uint64_t>(i)) >> 11) * 0x1p-53;
    store_from_float(data, dtype, i, static_cast<float>(lo + (hi - lo) * u));
  }
}

std::int64_t kv_rotation_bytes(std::int64_t floor) { return std::max(floor, 2 * cpu_last_level_cache_bytes()); }

std::string cpu_device_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    const std::size_t first = name.find_first_not_of(" \t");
    return first == std::string::npos ? "cpu" : name.substr(first);
  }
  return "cpu";
}

nlohmann::json make_record(const RecordCase& c, const Timing& t) {
  nlohmann::json r;
  r["op"] = c.op;
  r["backend"] = "cpu";
  r["device"] = cpu_device_name();
  r["dtype"] = std::string(to_string(c.dtype));
  r["kv_dtype"] = std::string(to_string(c.kv_dtype));
  r["layout"] = std::string(to_string(c.layout));
  r["page_size"] = c.page_size;
  r["num_q_heads"] = c.num_q_heads;
  r["num_kv_heads"] = c.num_kv_heads;
  r["head_dim"] = c.head_dim;
  r["batch"] = c.batch;
  r["seq_lens_desc"] = c.seq_lens_desc;
  r["num_threads"] = c.num_threads > 0 ? c.num_threads : omp_get_max_threads();
  r["simd_target"] = cpu_simd_target();
  r["bf16_products"] = cpu_bf16_products();  // AVX512-BF16 and/or AMX tiles: what the ratio ran on
  r["time_us_median"] = t.median_us;
  r["time_us_min"] = t.min_us;
  return r;
}

void add_bandwidth(nlohmann::json& record, double bytes, double ceiling_gbps) {
  const double seconds = record.value("time_us_median", 0.0) * 1e-6;
  const double gbps = seconds > 0.0 ? bytes / seconds / 1e9 : 0.0;
  record["bytes"] = bytes;
  record["achieved_gbps"] = gbps;
  record["ceiling_gbps"] = ceiling_gbps;
  record["ratio_to_ceiling"] = ceiling_gbps > 0.0 ? gbps / ceiling_gbps : 0.0;
}

void add_throughput(nlohmann::json& record, double flops, double ceiling_tflops) {
  const double seconds = record.value("time_us_median", 0.0) * 1e-6;
  const double tflops = seconds > 0.0 ? flops / seconds / 1e12 : 0.0;
  record["flops"] = flops;
  record["achieved_tflops"] = tflops;
  record["ceiling_tflops"] = ceiling_tflops;
  record["ratio_to_ceiling"] = ceiling_tflops > 0.0 ? tflops / ceiling_tflops : 0.0;
}

}  // namespace pagedattn::bench
