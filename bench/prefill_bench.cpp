// CPU prefill benchmark: batch x new_tokens queries (the last new_tokens positions of each
// sequence) over cached_tokens + new_tokens of paged KV, timed through the public
// pagedattn::prefill and compared with the fp32 FMA peak measured in the same run.
//
// FLOPs = 4 * (attended query-key pairs) * head_dim * num_q_heads (two products of 2 FLOPs per
// multiply-add; causal counts only the pairs actually attended). KV is random with shuffled page
// ids; when one KV set is smaller than kMinPoolBytes, several sets are rotated between
// iterations so that successive runs do not find the previous run's KV in the caches.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.h"
#include "benchmarks.h"
#include "page_ids.h"
#include "pagedattn/context.h"
#include "pagedattn/ops.h"
#include "pagedattn/page_table.h"
#include "pagedattn/system_info.h"

namespace pagedattn::bench {

namespace {

constexpr std::int64_t kMinPoolBytes = std::int64_t{256} << 20;  // K + V over all sets, at least
constexpr std::int64_t kMaxSets = 8;

}  // namespace

std::vector<nlohmann::json> run_prefill_bench(const PrefillBenchConfig& c,
                                              const Progress& progress) {
  const auto say = [&](const std::string& m) { if (progress) progress(m); };
  const std::int64_t kv_len = c.cached_tokens + c.new_tokens;
  const std::int64_t pages_per_seq = (kv_len + c.page_size - 1) / c.page_size;
  const std::int64_t pages_per_set = std::max<std::int64_t>(1, c.batch * pages_per_seq);
  const KVCacheSpec one_set{c.layout, c.kv_dtype, pages_per_set, c.page_size, c.num_kv_heads,
                            c.head_dim};
  const std::int64_t set_bytes = 2 * one_set.bytes_per_tensor();
  const std::int64_t sets =
      std::clamp<std::int64_t>(kv_rotation_bytes(kMinPoolBytes) / std::max<std::int64_t>(1, set_bytes), 1, kMaxSets);
  KVCacheSpec spec = one_set;
  spec.num_pages = pages_per_set * sets;

  say("prefill: filling " + std::to_string(sets) + " KV set(s) of " +
      std::to_string(set_bytes >> 20) + " MiB");
  // Uniform values in [-1, 1]; fp8 is stored in the scale's units (x / scale).
  const float fp8_scale = is_fp8(c.kv_dtype) ? 1.0f / 64.0f : 1.0f;
  const double kv_bound = 1.0 / fp8_scale;
  std::vector<std::byte> k_pool(static_cast<std::size_t>(spec.bytes_per_tensor()));
  std::vector<std::byte> v_pool(k_pool.size());
  fill_random(k_pool.data(), c.kv_dtype, spec.elements_per_tensor(), c.seed, -kv_bound, kv_bound,
              c.num_threads);
  fill_random(v_pool.data(), c.kv_dtype, spec.elements_per_tensor(), c.seed + 1, -kv_bound, kv_bound,
              c.num_threads);
  PagedKV cache = spec.make_views(k_pool.data(), v_pool.data());
  cache.k_scale = cache.v_scale = fp8_scale;

  const std::vector<std::int32_t> ids = shuffled_page_ids(spec.num_pages, c.seed);
  // Each KV set is a page table over its own (shuffled) share of the pool.
  std::vector<BlockTableData> kv_sets(static_cast<std::size_t>(sets));
  for (std::int64_t s = 0; s < sets; ++s) {
    BlockTableData& t = kv_sets[static_cast<std::size_t>(s)];
    t.num_seqs = c.batch;
    t.max_pages = pages_per_seq;
    t.block_table.assign(ids.begin() + s * pages_per_set,
                         ids.begin() + s * pages_per_set + c.batch * pages_per_seq);
    t.seq_lens.assign(static_cast<std::size_t>(c.batch), static_cast<std::int32_t>(kv_len));
  }

  const std::int64_t total_q = c.batch * c.new_tokens;
  const std::int64_t row = c.num_q_heads * c.head_dim;
  std::vector<std::byte> q(static_cast<std::size_t>(total_q * row) * dtype_size(c.dtype));
  std::vector<std::byte> out(q.size());
  fill_random(q.data(), c.dtype, total_q * row, c.seed + 2, -1.0, 1.0, c.num_threads);
  std::vector<std::int32_t> indptr(static_cast<std::size_t>(c.batch + 1));
  for (std::int64_t s = 0; s <= c.batch; ++s) {
    indptr[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(s * c.new_tokens);
  }
  const TensorView q_view(q.data(), c.dtype, {total_q, c.num_q_heads, c.head_dim});
  const TensorView out_view(out.data(), c.dtype, {total_q, c.num_q_heads, c.head_dim});
  const TensorView indptr_view(indptr.data(), DType::kI32, {c.batch + 1});
  AttentionParams params;
  params.causal = c.causal;
  const Context ctx = Context::cpu(c.num_threads);

  // Query i of n (0-based) sits at position cached + i and, causally, sees cached + i + 1 keys.
  const double n = static_cast<double>(c.new_tokens);
  const double pairs_per_seq = c.causal ? n * static_cast<double>(c.cached_tokens) + n * (n + 1) / 2
                                        : n * static_cast<double>(kv_len);
  const double flops = 4.0 * static_cast<double>(c.batch) * pairs_per_seq *
                       static_cast<double>(c.head_dim * c.num_q_heads);

  std::vector<BlockTable> tables;
  for (BlockTableData& t : kv_sets) tables.push_back(t.view());
  const Timing timing = time_calls(
      [&](int call) {
        const BlockTable& table = tables[static_cast<std::size_t>(call) % tables.size()];
        prefill(ctx, q_view, indptr_view, cache, table, params, out_view);
      },
      c.warmup, c.iterations);

  say("prefill: measuring the fp32 FMA peak");
  const double peak_gflops = measure_fp32_fma_peak_gflops(c.num_threads);

  const RecordCase rc{"prefill", c.dtype, c.kv_dtype, c.layout, c.page_size, c.num_q_heads,
                      c.num_kv_heads, c.head_dim, c.batch,
                      std::to_string(c.batch) + " x (" + std::to_string(c.cached_tokens) +
                          " cached + " + std::to_string(c.new_tokens) + " new)",
                      c.num_threads};
  nlohmann::json r = make_record(rc, timing);
  r["threads"] = c.num_threads > 0 ? c.num_threads : cpu_hardware_threads();
  r["causal"] = c.causal;
  r["new_tokens"] = c.new_tokens;
  r["cached_tokens"] = c.cached_tokens;
  r["kv_sets"] = sets;
  r["iterations"] = c.iterations;
  add_throughput(r, flops, peak_gflops / 1e3);
  r["achieved_gflops"] = r["achieved_tflops"].get<double>() * 1e3;
  r["ceiling"] = "fp32 FMA peak, measured in this run";
  return {r};
}

}  // namespace pagedattn::bench
