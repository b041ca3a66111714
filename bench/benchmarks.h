// pagedattn benchmarks: each measures the library against a ceiling measured in the same run
// and returns one JSON record per case, in the contract of BENCHMARKS.md ("op", "backend",
// "device", "dtype", "kv_dtype", "layout", "page_size", "num_q_heads", "num_kv_heads",
// "head_dim", "batch", "seq_lens_desc", "time_us_median", "time_us_min", "achieved_gbps" or
// "achieved_tflops", "ceiling_gbps" or "ceiling_tflops", "ratio_to_ceiling", ...).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedattn/dtype.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/ops.h"

namespace pagedattn::bench {

// Called with a one-line progress message while a benchmark runs (may be empty).
using Progress = std::function<void(const std::string&)>;

struct DecodeBenchConfig {
  int num_threads = 0;  // 0 = all hardware threads
  int warmup = 2;
  int iterations = 10;  // median and min over these
  DType q_dtype = DType::kBF16;
  std::vector<DType> kv_dtypes = {DType::kBF16, DType::kF32};
  KVLayout layout = KVLayout::kNHD;
  std::int64_t page_size = 16;
  std::int64_t num_q_heads = 32, num_kv_heads = 8, head_dim = 128;
  std::int64_t batch = 16, seq_len = 2048;
  std::uint64_t seed = 1234;
};

struct PrefillBenchConfig {
  int num_threads = 0;
  int warmup = 1;
  int iterations = 10;
  DType dtype = DType::kBF16;     // q and output
  DType kv_dtype = DType::kBF16;  // the cache: f32/f16/bf16, or fp8 e4m3/e5m2 (scale 1/64)
  KVLayout layout = KVLayout::kNHD;
  std::int64_t page_size = 16;
  std::int64_t num_q_heads = 32, num_kv_heads = 8, head_dim = 128;
  std::int64_t batch = 1, new_tokens = 2048, cached_tokens = 0;  // queries = the last new_tokens
  bool causal = true;
  std::uint64_t seed = 1234;
};

// Cascade: `batch` sequences sharing one prefix (the same physical pages) + their own tokens;
// bf16 q, KV and output.
struct CascadeBenchConfig {
  int num_threads = 0;
  int warmup = 1;
  int iterations = 5;
  std::int64_t batch = 64, shared_tokens = 16384, own_tokens = 256;  // batch: sequences
  std::int64_t num_q_heads = 32, num_kv_heads = 8, head_dim = 128, page_size = 16;
  KVLayout layout = KVLayout::kNHD;
  std::uint64_t seed = 1234;
};

// Ceilings, measured on all `num_threads` threads.
// Streaming read of a >= 1 GiB buffer, summed with SIMD: bytes / second / 1e9.
double measure_stream_read_gbps(int num_threads);
// fp32 fused multiply-add peak (independent FMA chains in registers): GFLOP/s (2 per FMA).
double measure_fp32_fma_peak_gflops(int num_threads);

// ---- CUDA (available when the CUDA backend is built) ----

struct CudaDecodeShape {
  std::string name;               // BENCHMARKS.md name, e.g. "d-b64"
  std::vector<std::int64_t> lens; // KV tokens per sequence
  std::int64_t num_q_heads = 32, num_kv_heads = 8, head_dim = 128, page_size = 16;
  DType kv_dtype = DType::kBF16;
  DType q_dtype = DType::kBF16;   // q's and the output's
  KVLayout layout = KVLayout::kNHD;
  DecodeVariant variant = DecodeVariant::kAuto;
  int partition_size = 0;         // 0: the planner's choice
};

struct CudaDecodeBenchConfig {
  int device = 0;
  int warmup = 10;
  int iterations = 100;  // median and min over these
  // true: each case captured once in a CUDA graph and replayed (no host work in the timed
  // region); false: decode called directly between the events, as eager frameworks run it.
  bool graph = true;
  bool deterministic = true;  // DecodeOptions::deterministic
  std::vector<CudaDecodeShape> shapes;
};

// GQA 32/8 and MHA 32/32 on d-long1, d-mid16, d-b64, d-b256, d-b32-16k, d-ragged (bf16, page
// 16), then fp8 e4m3/e5m2 KV and page sizes 1, 32, 128 on d-b64 GQA.
std::vector<CudaDecodeShape> standard_cuda_decode_shapes();
// `count` lengths uniform in [1, max_len] from `seed` (d-ragged: 128, 8192, seed 2024).
std::vector<std::int64_t> ragged_lengths(std::int64_t count, std::int64_t max_len, std::uint64_t seed);
// Device-to-device copy of 2 GiB: (bytes read + bytes written) / time, GB/s.
double measure_cuda_copy_gbps(int device);
std::string cuda_device_name(int device);
std::vector<nlohmann::json> run_cuda_decode_bench(const CudaDecodeBenchConfig& config,
                                                  const Progress& progress = {});

struct CudaPrefillShape {
  std::string name;  // BENCHMARKS.md name, e.g. "p-8x4096"
  std::int64_t batch = 8, new_tokens = 4096, cached_tokens = 0;
  std::int64_t num_q_heads = 32, num_kv_heads = 8, head_dim = 128, page_size = 16;
  DType dtype = DType::kBF16;     // q and output
  DType kv_dtype = DType::kBF16;  // the cache (fp8: values in [-1, 1], scales 1)
  KVLayout layout = KVLayout::kNHD;
  bool causal = true;
};

struct CudaPrefillBenchConfig {
  int device = 0;
  int warmup = 5;
  int iterations = 50;  // BENCHMARKS.md: the median of >= 50 launches
  // Warm-up of at least this long per shape: tensor-core kernels hold the GPU at its power
  // limit, and are timed at the clock they sustain (bench/torch_sdpa_prefill.py does the same).
  double warmup_ms = 500;
  std::vector<CudaPrefillShape> shapes;
};

// Causal prefill of 8 x 4096 new tokens and append of 512 onto 8 x 8192 (GQA 32/8, bf16), at
// page sizes 16 and 1.
std::vector<CudaPrefillShape> standard_cuda_prefill_shapes();
// Dense bf16 GEMM (8192^3, cuBLAS, f32 accumulation): TFLOP/s; 0 when built without cuBLAS.
double measure_cuda_matmul_tflops(int device);
std::vector<nlohmann::json> run_cuda_prefill_bench(const CudaPrefillBenchConfig& config,
                                                   const Progress& progress = {});

// Cascade: num_seqs sequences sharing one prefix (the same physical pages) + their own tokens.
struct CudaCascadeBenchConfig {
  int device = 0;
  int warmup = 5;
  int iterations = 50;
  std::int64_t num_seqs = 64, shared_tokens = 16384, own_tokens = 256;
  std::int64_t num_q_heads = 32, num_kv_heads = 8, head_dim = 128, page_size = 16;
  KVLayout layout = KVLayout::kNHD;  // bf16 q, KV and output
};

// Records beside the copy ceiling: plain decode with the cascade off (captured in a graph, and
// call by call), decode finding the cascade itself (call by call: the search is part of it; a
// captured graph would run plain; with its host time per call and the search's), and
// cascade_decode over the same layout on device levels, captured in a graph.
std::vector<nlohmann::json> run_cuda_cascade_bench(const CudaCascadeBenchConfig& config,
                                                   const Progress& progress = {});

std::vector<nlohmann::json> run_decode_bench(const DecodeBenchConfig& config, const Progress& progress = {});
std::vector<nlohmann::json> run_prefill_bench(const PrefillBenchConfig& config, const Progress& progress = {});
// Records beside the streaming-read ceiling: plain decode (cascade off), decode finding the
// cascade itself, and cascade_decode over the layout find_shared_prefixes gives.
std::vector<nlohmann::json> run_cascade_bench(const CascadeBenchConfig& config, const Progress& progress = {});

}  // namespace pagedattn::bench
