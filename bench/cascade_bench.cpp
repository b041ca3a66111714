// CPU cascade benchmark (BENCHMARKS.md's cascade shape by default): sequences sharing one long
// prefix in the same physical pages, each with its own tail, decoded plainly (the prefix read
// once per sequence), through decode's own detection, and through cascade_decode over the
// layout find_shared_prefixes gives; bandwidth counts the distinct KV bytes, each read once,
// against the streaming-read ceiling measured in the same run.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "benchmarks.h"
#include "huge_pages.h"
#include "page_ids.h"
#include "pagedattn/ops.h"
#include "pagedattn/shared_prefix.h"
#include "pagedattn/system_info.h"
#include "shared_prefix_table.h"

namespace pagedattn::bench {

std::vector<nlohmann::json> run_cascade_bench(const CascadeBenchConfig& c, const Progress& progress) {
  const auto say = [&](const std::string& m) { if (progress) progress(m); };
  const std::int64_t S = c.batch, P = c.page_size, D = c.head_dim, Hq = c.num_q_heads, Hkv = c.num_kv_heads;
  const std::int64_t shared_pages = c.shared_tokens / P, own_pages = (c.own_tokens + P - 1) / P;
  const std::int64_t len = shared_pages * P + c.own_tokens, pages = shared_pages + S * own_pages;
  const KVCacheSpec spec{c.layout, DType::kBF16, std::max<std::int64_t>(1, pages), P, Hkv, D};
  say("cascade: filling " + std::to_string(2 * spec.bytes_per_tensor() >> 20) + " MiB of KV");
  const auto bytes = static_cast<std::size_t>(spec.bytes_per_tensor());
  HugeBuffer<std::byte> k = allocate_huge<std::byte>(bytes), v = allocate_huge<std::byte>(bytes);
  fill_random(k.get(), DType::kBF16, spec.elements_per_tensor(), c.seed, -2.0, 2.0, c.num_threads);
  fill_random(v.get(), DType::kBF16, spec.elements_per_tensor(), c.seed + 1, -2.0, 2.0, c.num_threads);
  const PagedKV cache = spec.make_views(k.get(), v.get());
  BlockTableData bt = shared_prefix_table(shuffled_page_ids(spec.num_pages, c.seed), S, shared_pages, own_pages, len);
  const PageTable table = bt.view();

  std::vector<std::byte> q(static_cast<std::size_t>(S * Hq * D) * 2), out(q.size());
  fill_random(q.data(), DType::kBF16, S * Hq * D, c.seed + 2, -1.0, 1.0, c.num_threads);
  const TensorView q_view(q.data(), DType::kBF16, {S, Hq, D}), out_view(out.data(), DType::kBF16, {S, Hq, D});
  const Context ctx = Context::cpu(c.num_threads);
  CascadeLayout layout = find_shared_prefixes(table, P);  // views() points into it
  const std::vector<CascadeLevel> levels = layout.views();

  const RecordCase rc{"cascade", DType::kBF16, DType::kBF16, c.layout, P, Hq, Hkv, D, S,
                      std::to_string(S) + " x (" + std::to_string(shared_pages * P) + " shared + " +
                          std::to_string(c.own_tokens) + " own)",
                      c.num_threads};
  std::vector<std::pair<std::string, Timing>> timings;
  DecodeOptions plain;
  plain.cascade = false;
  say("cascade: plain decode");
  timings.emplace_back("decode_plain", time_calls([&](int) {
    decode(ctx, q_view, cache, table, AttentionParams{}, out_view, {}, plain);
  }, c.warmup, c.iterations));
  say("cascade: decode finding it");
  timings.emplace_back("decode_auto_cascade", time_calls([&](int) {
    decode(ctx, q_view, cache, table, AttentionParams{}, out_view);
  }, c.warmup, c.iterations));
  say("cascade: cascade_decode");
  timings.emplace_back("cascade_decode", time_calls([&](int) {
    cascade_decode(ctx, q_view, cache, levels, AttentionParams{}, out_view);
  }, c.warmup, c.iterations));
  say("cascade: measuring the read ceiling");
  const double ceiling = measure_stream_read_gbps(c.num_threads);

  // Each distinct K/V token once (the prefix once, every own tail once), q in and out: what
  // the shape needs, whatever the detector found.
  const double distinct = 2.0 * static_cast<double>((shared_pages * P + S * c.own_tokens) * Hkv * D) * 2.0 +
                          2.0 * static_cast<double>(q.size());
  std::vector<nlohmann::json> records;
  for (const auto& [variant, timing] : timings) {
    nlohmann::json r = make_record(rc, timing);
    r["variant"] = variant;
    r["threads"] = c.num_threads > 0 ? c.num_threads : cpu_hardware_threads();
    r["cascade_levels"] = layout.shared_levels();
    r["anon_huge_pages_mib"] = anon_huge_kib() / 1024;  // pools and ceiling buffer: huge_pages.h
    r["iterations"] = c.iterations;
    r["speedup_vs_plain"] = timings.front().second.median_us / timing.median_us;
    add_bandwidth(r, distinct, ceiling);  // the distinct bytes: what reading each byte once costs
    r["ceiling"] = "streaming read, measured in this run";
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace pagedattn::bench
