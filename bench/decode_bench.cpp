// CPU decode benchmark: pagedattn::decode (fast path) over a paged cache larger than the last-level
// cache, with random data and shuffled page ids, against the machine's streaming-read ceiling
// measured in the same run.
//
// Achieved bandwidth = (Q bytes + K and V bytes of the valid tokens + output bytes) / median time.
// When one KV set is small, several sets (page tables over disjoint pages of one pool) are
// rotated between calls so that every call streams its K/V from DRAM.
#include <algorithm>
#include <string>
#include <vector>

#include "bench_common.h"
#include "benchmarks.h"
#include "huge_pages.h"
#include "page_ids.h"
#include "pagedattn/ops.h"

namespace pagedattn::bench {

namespace {
// KV bytes that every rotation must stream, at least (4x a 32 MiB L3; kv_rotation_bytes raises
// it to twice the machine's last-level cache).
constexpr std::int64_t kMinRotationBytes = std::int64_t{128} << 20;

struct Variant {
  const char* name;
  DecodeVariant variant;
};
constexpr Variant kVariants[] = {
    {"auto", DecodeVariant::kAuto},
    {"one_pass", DecodeVariant::kOnePass},
    {"split_k", DecodeVariant::kSplitK},
};

// One dtype's cache: a pool of pages and `sets` block tables over disjoint, shuffled pages.
struct BenchCache {
  HugeBuffer<std::byte> k, v;
  PagedKV views;
  std::vector<BlockTableData> tables;
};

BenchCache make_cache(const DecodeBenchConfig& cfg, DType kv_dtype, std::uint64_t seed) {
  const std::int64_t pages_per_seq = (cfg.seq_len + cfg.page_size - 1) / cfg.page_size;
  const std::int64_t pages_per_set = std::max<std::int64_t>(1, cfg.batch * pages_per_seq);
  KVCacheSpec spec{cfg.layout, kv_dtype, pages_per_set, cfg.page_size, cfg.num_kv_heads, cfg.head_dim};
  const std::int64_t set_bytes = 2 * spec.bytes_per_tensor();
  const std::int64_t sets = std::max<std::int64_t>(1, (kv_rotation_bytes(kMinRotationBytes) + set_bytes - 1) / set_bytes);
  spec.num_pages = sets * pages_per_set;

  BenchCache c;
  const auto bytes = static_cast<std::size_t>(spec.bytes_per_tensor());
  c.k = allocate_huge<std::byte>(bytes);
  c.v = allocate_huge<std::byte>(bytes);
  fill_random(c.k.get(), kv_dtype, spec.elements_per_tensor(), seed, -2.0, 2.0, cfg.num_threads);
  fill_random(c.v.get(), kv_dtype, spec.elements_per_tensor(), seed + 1, -2.0, 2.0, cfg.num_threads);
  c.views = spec.make_views(c.k.get(), c.v.get());
  if (is_fp8(kv_dtype)) {
    c.views.k_scale = 0.5f;
    c.views.v_scale = 0.5f;
  }

  const std::vector<std::int32_t> perm = shuffled_page_ids(spec.num_pages, seed);
  for (std::int64_t s = 0; s < sets; ++s) {
    BlockTableData t;
    t.num_seqs = cfg.batch;
    t.max_pages = pages_per_seq;
    t.block_table.assign(perm.begin() + s * pages_per_set, perm.begin() + (s + 1) * pages_per_set);
    t.seq_lens.assign(static_cast<std::size_t>(cfg.batch), static_cast<std::int32_t>(cfg.seq_len));
    c.tables.push_back(std::move(t));
  }
  return c;
}
}  // namespace

std::vector<nlohmann::json> run_decode_bench(const DecodeBenchConfig& config, const Progress& progress) {
  auto say = [&](const std::string& msg) { if (progress) progress(msg); };
  const DecodeBenchConfig& cfg = config;
  // The machine's read bandwidth drifts (other tenants, power states) by up to 2x between
  // seconds, so the ceiling is sampled before and after every timed case and each record is
  // rated against the larger neighbouring sample: a conservative ratio.
  say("measuring the streaming-read ceiling");
  double ceiling_before = measure_stream_read_gbps(cfg.num_threads);

  const std::int64_t S = cfg.batch, Hq = cfg.num_q_heads, D = cfg.head_dim;
  const auto q_elems = S * Hq * D;
  std::vector<std::byte> q(static_cast<std::size_t>(q_elems) * dtype_size(cfg.q_dtype));
  std::vector<std::byte> out(q.size());
  fill_random(q.data(), cfg.q_dtype, q_elems, cfg.seed + 7, -1.0, 1.0, cfg.num_threads);
  const TensorView q_view(q.data(), cfg.q_dtype, {S, Hq, D});
  const TensorView out_view(out.data(), cfg.q_dtype, {S, Hq, D});
  const Context ctx = Context::cpu(cfg.num_threads);

  std::vector<nlohmann::json> records;
  for (DType kv_dtype : cfg.kv_dtypes) {
    say("building a " + std::string(to_string(kv_dtype)) + " cache");
    BenchCache cache = make_cache(cfg, kv_dtype, cfg.seed);
    std::vector<BlockTable> tables;
    for (auto& t : cache.tables) tables.push_back(t.view());
    const double kv_bytes = 2.0 * static_cast<double>(S * cfg.seq_len * cfg.num_kv_heads * D) *
                            static_cast<double>(dtype_size(kv_dtype));
    const double bytes = kv_bytes + 2.0 * static_cast<double>(q_elems * dtype_size(cfg.q_dtype));

    for (const Variant& var : kVariants) {
      say("timing decode " + std::string(to_string(kv_dtype)) + " " + var.name);
      const DecodeOptions options{var.variant, 0};
      const Timing t = time_calls(
          [&](int call) {
            decode(ctx, q_view, cache.views, tables[static_cast<std::size_t>(call) % tables.size()],
                   AttentionParams{}, out_view, TensorView{}, options);
          },
          cfg.warmup, cfg.iterations);
      RecordCase rc{"decode", cfg.q_dtype, kv_dtype, cfg.layout, cfg.page_size, Hq,
                    cfg.num_kv_heads, D, S, std::to_string(S) + "x" + std::to_string(cfg.seq_len),
                    cfg.num_threads};
      say("measuring the streaming-read ceiling");
      const double ceiling_after = measure_stream_read_gbps(cfg.num_threads);
      nlohmann::json r = make_record(rc, t);
      r["variant"] = var.name;
      r["kv_sets"] = tables.size();
      r["anon_huge_pages_mib"] = anon_huge_kib() / 1024;  // pools and ceiling buffer: huge_pages.h
      r["ceiling_samples_gbps"] = {ceiling_before, ceiling_after};
      add_bandwidth(r, bytes, std::max(ceiling_before, ceiling_after));
      ceiling_before = ceiling_after;
      records.push_back(std::move(r));
    }
  }
  return records;
}

}  // namespace pagedattn::bench
