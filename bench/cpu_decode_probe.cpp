// A CPU decode probe for kernel work: one decode call (GQA, NHD by default, page 16, shuffled pages) timed
// over many calls, with nothing else in the process worth counting, so that
//   valgrind --tool=callgrind --toggle-collect='pagedattn::decode*' build/bench/cpu_decode_probe ...
// counts the decode's instructions alone (`pagedattn bench` spends billions filling its pools
// and measuring its ceiling), and timings of a single thread or of the KV in L2/L3 are easy to
// take. Not a benchmark of record: `pagedattn bench decode` is (docs/perf-notes.md).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_common.h"
#include "huge_pages.h"
#include "page_ids.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/ops.h"
#include "pagedattn/page_table.h"

int main(int argc, char** argv) {
  using namespace pagedattn;
  int batch = 1, seq_len = 1024, iters = 10, threads = 1, kv_sets = 1, q_heads = 32, kv_heads = 8;
  std::string kv_dtype = "bf16", layout = "nhd";
  bool huge_pages = false;
  CLI::App app{"CPU decode probe: GQA decode over shuffled pages, bf16 q/out"};
  app.add_option("--batch", batch, "Sequences")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--seq-len", seq_len, "Tokens per sequence")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--iters", iters, "Calls timed")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--threads", threads, "CPU threads")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--kv-sets", kv_sets, "Disjoint KV sets rotated between calls (more: from DRAM)")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--q-heads", q_heads, "Query heads")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--kv-heads", kv_heads, "KV heads")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--kv-dtype", kv_dtype, "KV cache dtype")
      ->check(CLI::IsMember({"bf16", "f32", "f16", "fp8_e4m3", "fp8_e5m2"}))
      ->capture_default_str();
  app.add_option("--layout", layout, "KV layout: nhd, hnd or vllm")->check(CLI::IsMember({"nhd", "hnd", "vllm"}))->capture_default_str();
  app.add_flag("--huge-pages", huge_pages, "Pools in 2 MiB-aligned memory advised for transparent huge pages");
  CLI11_PARSE(app, argc, argv);

  constexpr int kPage = 16, kDim = 128;
  const int pages_per_seq = (seq_len + kPage - 1) / kPage;
  const std::int64_t pages = static_cast<std::int64_t>(batch) * pages_per_seq * kv_sets;
  const DType kv = parse_dtype(kv_dtype);
  const KVLayout kv_layout = layout == "hnd" ? KVLayout::kHND : layout == "vllm" ? KVLayout::kVllmSplit : KVLayout::kNHD;
  const KVCacheSpec spec{.layout = kv_layout, .dtype = kv, .num_pages = pages,
                         .page_size = kPage, .num_kv_heads = kv_heads, .head_dim = kDim};
  const std::size_t bytes = static_cast<std::size_t>(spec.elements_per_tensor()) * dtype_size(kv);
  const auto allocate = [&] {  // plain malloc: ordinary pages unless THP is "always"
    return huge_pages ? bench::allocate_huge<std::uint8_t>(bytes)
                      : bench::HugeBuffer<std::uint8_t>(static_cast<std::uint8_t*>(std::malloc(bytes)));
  };
  const auto k_pool = allocate(), v_pool = allocate();
  bench::fill_random(k_pool.get(), kv, spec.elements_per_tensor(), 1);
  bench::fill_random(v_pool.get(), kv, spec.elements_per_tensor(), 2);
  const PagedKV cache = spec.make_views(k_pool.get(), v_pool.get());
  if (huge_pages) std::printf("AnonHugePages: %ld KiB\n", bench::anon_huge_kib());
  const std::vector<std::int32_t> order = bench::shuffled_page_ids(pages, 3);
  std::vector<BlockTableData> tables(static_cast<std::size_t>(kv_sets));
  for (int set = 0; set < kv_sets; ++set) {
    BlockTableData& t = tables[static_cast<std::size_t>(set)];
    t.num_seqs = batch;
    t.max_pages = pages_per_seq;
    for (int b = 0; b < batch; ++b) {
      t.seq_lens.push_back(seq_len);
      for (int p = 0; p < pages_per_seq; ++p) {
        t.block_table.push_back(order[static_cast<std::size_t>((set * batch + b) * pages_per_seq + p)]);
      }
    }
  }
  const std::int64_t q_elems = static_cast<std::int64_t>(batch) * q_heads * kDim;
  std::vector<std::uint16_t> q(static_cast<std::size_t>(q_elems)), out(q.size());
  bench::fill_random(q.data(), DType::kBF16, q_elems, 4);

  const Context ctx = Context::cpu(threads);
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    decode(ctx, TensorView(q.data(), DType::kBF16, {batch, q_heads, kDim}), cache,
           tables[static_cast<std::size_t>(i % kv_sets)].view(), AttentionParams{},
           TensorView(out.data(), DType::kBF16, {batch, q_heads, kDim}));
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  const double key_heads = static_cast<double>(batch) * seq_len * kv_heads;
  const double median = us[us.size() / 2];
  std::printf("median %.1f us, min %.1f us; ns per (key, KV head) and thread: median %.1f, min %.1f\n", median,
              us.front(), median * 1e3 * threads / key_heads, us.front() * 1e3 * threads / key_heads);
  return 0;
}
