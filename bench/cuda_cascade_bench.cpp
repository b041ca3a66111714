// GPU cascade benchmark (BENCHMARKS.md): sequences sharing one long prefix in the same physical
// pages, each with its own tail, decoded plainly, through decode's own detection, and through
// cascade_decode on device levels; bandwidth counts the distinct KV bytes, each read once.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "benchmarks.h"
#include "cuda_bench_util.h"
#include "pagedattn/ops.h"
#include "pagedattn/shared_prefix.h"
#include "shared_prefix_table.h"

namespace pagedattn::bench {

std::vector<nlohmann::json> run_cuda_cascade_bench(const CudaCascadeBenchConfig& config, const Progress& progress) {
  ok(cudaSetDevice(config.device), "set device");
  const Device gpu = Device::cuda(config.device);
  const std::string device = cuda_device_name(config.device);
  if (progress) progress("measuring the copy ceiling");
  const double ceiling = measure_cuda_copy_gbps(config.device);
  const Stream stream;

  const std::int64_t S = config.num_seqs, P = config.page_size, D = config.head_dim;
  const std::int64_t Hq = config.num_q_heads, Hkv = config.num_kv_heads;
  const std::int64_t shared_pages = config.shared_tokens / P, own_pages = (config.own_tokens + P - 1) / P;
  const std::int64_t len = shared_pages * P + config.own_tokens, per_seq = shared_pages + own_pages;
  const std::int64_t pages = shared_pages + S * own_pages;
  const RandomCache pool(KVCacheSpec{config.layout, DType::kBF16, pages, P, Hkv, D}, config.device);
  const PagedKV& cache = pool.views;
  // Shuffled page ids: the prefix's pages first in every row, then each sequence's own.
  BlockTableData bt = shared_prefix_table(shuffled_page_ids(pages, kPageOrderSeed), S, shared_pages, own_pages, len);
  Gpu table(bt.block_table.size() * 4), lens(bt.seq_lens.size() * 4);
  ok(cudaMemcpy(table.ptr, bt.block_table.data(), bt.block_table.size() * 4, cudaMemcpyHostToDevice), "table");
  ok(cudaMemcpy(lens.ptr, bt.seq_lens.data(), bt.seq_lens.size() * 4, cudaMemcpyHostToDevice), "lens");
  const PageTable host_table = bt.view();
  const PageTable dev_table = BlockTable{TensorView(table.ptr, DType::kI32, {S, per_seq}, gpu),
                                         TensorView(lens.ptr, DType::kI32, {S}, gpu)};
  const std::size_t q_bytes = static_cast<std::size_t>(S * Hq * D) * 2;
  constexpr std::size_t kWorkspace = std::size_t{256} << 20;
  Gpu q(q_bytes), out(q_bytes), workspace(kWorkspace);
  fill_random(q.ptr, q_bytes, DType::kBF16, 3);
  Context ctx{gpu, stream};
  ctx.workspace = {static_cast<std::byte*>(workspace.ptr), kWorkspace};
  const TensorView q_view(q.ptr, DType::kBF16, {S, Hq, D}, gpu), out_view(out.ptr, DType::kBF16, {S, Hq, D}, gpu);

  // The same layout decode finds, on the device, for cascade_decode.
  CascadeLayout layout = find_shared_prefixes(host_table, P);
  std::vector<CascadeLevel> host_levels = layout.views();
  std::vector<std::unique_ptr<Gpu>> level_buffers;
  std::vector<CascadeLevel> dev_levels;
  auto upload = [&](const TensorView& t) {
    const auto bytes = static_cast<std::size_t>(t.numel()) * 4;
    level_buffers.push_back(std::make_unique<Gpu>(bytes));
    if (bytes) ok(cudaMemcpy(level_buffers.back()->ptr, t.data(), bytes, cudaMemcpyHostToDevice), "level");
    return TensorView::rebind(t, level_buffers.back()->ptr, gpu);
  };
  for (const CascadeLevel& level : host_levels) {
    const auto& t = std::get<CsrPageTable>(level.table);
    dev_levels.push_back({CsrPageTable{upload(t.indptr), upload(t.indices), upload(t.last_page_len)},
                          upload(level.seq_to_row)});
  }

  const double distinct = 2.0 * static_cast<double>(layout.tokens_cascade * Hkv * D) * 2.0 + 2.0 * static_cast<double>(q_bytes);
  const std::string desc = std::to_string(S) + " x (" + std::to_string(shared_pages * P) + " shared + " +
                           std::to_string(config.own_tokens) + " own)";
  std::vector<nlohmann::json> records;
  auto record = [&](const char* variant, const std::vector<double>& us) {
    nlohmann::json r = {{"op", "cascade"}, {"backend", "cuda"}, {"device", device}, {"dtype", "bf16"},
                        {"kv_dtype", "bf16"}, {"layout", std::string(to_string(config.layout))}, {"page_size", P},
                        {"num_q_heads", Hq}, {"num_kv_heads", Hkv}, {"head_dim", D}, {"batch", S},
                        {"shape", "cascade-64x16384+256"}, {"seq_lens_desc", desc}, {"variant", variant},
                        {"cascade_levels", layout.shared_levels()},
                        {"time_us_median", median(us)}, {"time_us_min", *std::min_element(us.begin(), us.end())},
                        {"iterations", config.iterations}};
    add_bandwidth(r, distinct, ceiling);  // the distinct bytes: what reading each byte once costs
    records.push_back(std::move(r));
  };
  DecodeOptions plain{DecodeVariant::kAuto, 0, &host_table};
  plain.cascade = false;
  if (progress) progress("cascade: plain decode");
  record("decode_plain", time_captured(stream, [&] {
    decode(ctx, q_view, cache, dev_table, AttentionParams{}, out_view, {}, plain);
  }, config.warmup, config.iterations));
  // Host time of one call on an idle stream (checks, search, plan, launches).
  auto host_time = [&](auto&& call) {
    std::vector<double> us;
    for (int i = 0; i < config.iterations; ++i) {
      ok(cudaStreamSynchronize(stream), "sync");
      const auto t0 = std::chrono::steady_clock::now();
      call();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(us);
  };
  auto plain_call = [&] { decode(ctx, q_view, cache, dev_table, AttentionParams{}, out_view, {}, plain); };
  record("decode_plain_calls", time_calls(stream, plain_call, config.warmup, config.iterations));
  records.back()["host_us_median"] = host_time(plain_call);
  if (progress) progress("cascade: decode finding it");
  const DecodeOptions automatic{DecodeVariant::kAuto, 0, &host_table};
  auto auto_call = [&] { decode(ctx, q_view, cache, dev_table, AttentionParams{}, out_view, {}, automatic); };
  record("decode_auto_cascade", time_calls(stream, auto_call, config.warmup, config.iterations));
  records.back()["host_us_median"] = host_time(auto_call);
  records.back()["search_us_median"] = host_time([&] { (void)find_shared_prefixes(host_table, P); });
  if (progress) progress("cascade: cascade_decode");
  record("cascade_decode", time_captured(stream, [&] {
    cascade_decode(ctx, q_view, cache, dev_levels, AttentionParams{}, out_view, {}, CascadeOptions{host_levels});
  }, config.warmup, config.iterations));
  const double plain_us = records[0]["time_us_median"].get<double>();
  for (nlohmann::json& r : records) r["speedup_vs_plain"] = plain_us / r["time_us_median"].get<double>();
  return records;
}

}  // namespace pagedattn::bench
