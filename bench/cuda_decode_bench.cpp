// GPU decode benchmark: the BENCHMARKS.md decode shapes through pagedattn::decode on CUDA,
// beside the device-to-device copy ceiling measured in the same run.
//
// Each case is captured once in a CUDA graph and replayed; consecutive events around the
// replays give per-launch times with no host work in between (the op validates its page table
// on the host, which would otherwise sit inside the timed region). With `graph` off, decode is
// called directly between the events instead, the way eager frameworks (and
// bench/torch_sdpa_decode.py by default) launch: the host work counts only where the GPU waits
// for it, and kernels follow each other without a graph launch between them.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.h"
#include "cuda_bench_util.h"
#include "benchmarks.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn::bench {

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, device), "device properties");
  return prop.name;
}

double measure_cuda_copy_gbps(int device) {
  ok(cudaSetDevice(device), "set device");
  constexpr std::size_t kBytes = std::size_t{2} << 30;  // 2 GiB read + 2 GiB written per copy
  Gpu src(kBytes), dst(kBytes);
  ok(cudaMemset(src.ptr, 1, kBytes), "memset");
  const Stream stream;
  const Events events(2);
  const cudaEvent_t a = events[0], b = events[1];
  std::vector<double> gbps;
  for (int i = 0; i < 12; ++i) {
    ok(cudaEventRecord(a, stream), "record");
    ok(cudaMemcpyAsync(dst.ptr, src.ptr, kBytes, cudaMemcpyDeviceToDevice, stream), "copy");
    ok(cudaEventRecord(b, stream), "record");
    ok(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, a, b), "elapsed");
    if (i >= 2) gbps.push_back(2.0 * static_cast<double>(kBytes) / (ms * 1e-3) / 1e9);
  }
  return median(gbps);
}

std::vector<std::int64_t> ragged_lengths(std::int64_t count, std::int64_t max_len, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> length(1, max_len);
  std::vector<std::int64_t> lens(static_cast<std::size_t>(count));
  for (auto& l : lens) l = length(rng);
  return lens;
}

std::vector<CudaDecodeShape> standard_cuda_decode_shapes() {
  std::vector<CudaDecodeShape> out;
  const std::vector<std::int64_t> ragged_lens = ragged_lengths(128, 8192, 2024);
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes = {
      {"d-long1", std::vector<std::int64_t>(1, 32768)},    {"d-mid16", std::vector<std::int64_t>(16, 4096)},
      {"d-b64", std::vector<std::int64_t>(64, 2048)},      {"d-b256", std::vector<std::int64_t>(256, 1024)},
      {"d-b32-16k", std::vector<std::int64_t>(32, 16384)}, {"d-ragged", ragged_lens}};
  for (std::int64_t kv_heads : {8, 32}) {
    for (const auto& [name, lens] : shapes) {
      CudaDecodeShape s;
      s.name = name;
      s.lens = lens;
      s.num_kv_heads = kv_heads;
      out.push_back(s);
    }
  }
  for (DType kv : {DType::kF8E4M3, DType::kF8E5M2}) {
    CudaDecodeShape s;
    s.name = "d-b64";
    s.lens = std::vector<std::int64_t>(64, 2048);
    s.kv_dtype = kv;
    out.push_back(s);
  }
  for (std::int64_t ps : {1, 32, 128}) {
    CudaDecodeShape s;
    s.name = "d-b64";
    s.lens = std::vector<std::int64_t>(64, 2048);
    s.page_size = ps;
    out.push_back(s);
  }
  return out;
}

std::vector<nlohmann::json> run_cuda_decode_bench(const CudaDecodeBenchConfig& config,
                                                  const Progress& progress) {
  ok(cudaSetDevice(config.device), "set device");
  const std::string device = cuda_device_name(config.device);
  if (progress) progress("measuring the copy ceiling");
  const double ceiling = measure_cuda_copy_gbps(config.device);
  const Stream stream;
  std::vector<nlohmann::json> records;
  for (const CudaDecodeShape& shape : config.shapes) {
    if (progress) progress("decode " + shape.name + " h" + std::to_string(shape.num_q_heads) + "/" +
                           std::to_string(shape.num_kv_heads) + " " + std::string(to_string(shape.kv_dtype)) +
                           " page " + std::to_string(shape.page_size));
    const std::int64_t S = static_cast<std::int64_t>(shape.lens.size()), P = shape.page_size;
    const std::int64_t D = shape.head_dim, Hq = shape.num_q_heads, Hkv = shape.num_kv_heads;
    std::int64_t pages = 0, max_pages = 0, tokens = 0;
    for (auto l : shape.lens) {
      pages += (l + P - 1) / P;
      max_pages = std::max(max_pages, (l + P - 1) / P);
      tokens += l;
    }
    const RandomCache pool(KVCacheSpec{shape.layout, shape.kv_dtype, pages, P, Hkv, D}, config.device);
    PagedKV cache = pool.views;
    if (is_fp8(shape.kv_dtype)) cache.k_scale = cache.v_scale = 0.05f;
    const std::vector<std::int32_t> ids = shuffled_page_ids(pages, kPageOrderSeed);
    BlockTableData bt;
    bt.num_seqs = S;
    bt.max_pages = max_pages;
    bt.block_table.assign(static_cast<std::size_t>(S * max_pages), -1);
    std::size_t next = 0;
    for (std::int64_t s = 0; s < S; ++s) {
      bt.seq_lens.push_back(static_cast<std::int32_t>(shape.lens[static_cast<std::size_t>(s)]));
      for (std::int64_t j = 0; j * P < shape.lens[static_cast<std::size_t>(s)]; ++j) {
        bt.block_table[static_cast<std::size_t>(s * max_pages + j)] = ids[next++];
      }
    }
    Gpu table(bt.block_table.size() * 4), lens(bt.seq_lens.size() * 4);
    ok(cudaMemcpy(table.ptr, bt.block_table.data(), bt.block_table.size() * 4, cudaMemcpyHostToDevice), "table");
    ok(cudaMemcpy(lens.ptr, bt.seq_lens.data(), bt.seq_lens.size() * 4, cudaMemcpyHostToDevice), "lens");
    const PageTable host_table = bt.view();
    const PageTable dev_table = BlockTable{
        TensorView(table.ptr, DType::kI32, {S, max_pages}, Device::cuda(config.device)),
        TensorView(lens.ptr, DType::kI32, {S}, Device::cuda(config.device))};
    const std::size_t q_bytes = static_cast<std::size_t>(S * Hq * D) * dtype_size(shape.q_dtype);
    Gpu q(q_bytes), out(q_bytes), workspace(std::size_t{256} << 20);
    fill_random(q.ptr, q_bytes, shape.q_dtype, 3);
    Context ctx{Device::cuda(config.device), stream};
    ctx.workspace = {static_cast<std::byte*>(workspace.ptr), std::size_t{256} << 20};
    const TensorView q_view(q.ptr, shape.q_dtype, {S, Hq, D}, Device::cuda(config.device));
    const TensorView out_view(out.ptr, shape.q_dtype, {S, Hq, D}, Device::cuda(config.device));
    DecodeOptions options{shape.variant, shape.partition_size, &host_table};
    options.deterministic = config.deterministic;

    const auto call = [&] { decode(ctx, q_view, cache, dev_table, AttentionParams{}, out_view, {}, options); };
    const std::vector<double> us = config.graph ? time_captured(stream, call, config.warmup, config.iterations)
                                                : time_calls(stream, call, config.warmup, config.iterations);

    const double kv_bytes = 2.0 * static_cast<double>(tokens * Hkv * D) * static_cast<double>(dtype_size(shape.kv_dtype));
    const double bytes = kv_bytes + 2.0 * static_cast<double>(q_bytes);
    const double t_med = median(us), t_min = *std::min_element(us.begin(), us.end());
    std::string lens_desc = shape.name + " (" + std::to_string(S) + " seqs, " + std::to_string(tokens) + " tokens)";
    nlohmann::json r = {{"op", "decode"}, {"backend", "cuda"}, {"device", device}, {"dtype", std::string(to_string(shape.q_dtype))},
                       {"kv_dtype", std::string(to_string(shape.kv_dtype))}, {"layout", std::string(to_string(shape.layout))},
                       {"page_size", P}, {"num_q_heads", Hq}, {"num_kv_heads", Hkv}, {"head_dim", D},
                       {"batch", S}, {"shape", shape.name}, {"seq_lens_desc", lens_desc},
                       {"time_us_median", t_med}, {"time_us_min", t_min},
                       {"iterations", config.iterations}, {"launch", config.graph ? "graph" : "calls"},
                       {"variant", shape.variant == DecodeVariant::kOnePass ? "one_pass"
                                   : shape.variant == DecodeVariant::kSplitK ? "split_k" : "auto"},
                       {"partition_size", shape.partition_size}, {"deterministic", config.deterministic}};
    add_bandwidth(r, bytes, ceiling);
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace pagedattn::bench
