// `pagedattn bench decode|prefill|cascade`: the benchmarks of BENCHMARKS.md, each beside the
// machine's ceiling measured in the same run. Prints a table, or JSON records (one per line).
#include <charconv>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "benchmarks.h"
#include "cli.h"
#include "pagedattn/error.h"

namespace pagedattn::cli {
namespace {

// Options common to the benchmarks; defaults are the CPU shapes of BENCHMARKS.md.
struct BenchOptions {
  std::string device = "cpu";
  int threads = 0;
  int iters = 0;    // 0: the benchmark's own default (10 on the CPU, 50 or more on a GPU)
  int warmup = -1;  // -1: the benchmark's own default
  double warmup_ms = -1;  // GPU prefill: least warm-up time per shape; -1: the benchmark's
  std::string layout = "nhd";
  std::int64_t page_size = 16;
  std::string heads = "32/8";
  std::int64_t head_dim = 128;
  std::int64_t batch = 0;  // 0: the benchmark's default
  int partition_size = 0;  // GPU decode: split-K partition in tokens, 0: the planner's
  std::string launch = "graph";  // GPU decode: "graph" (captured, replayed) or "calls"
  bool nondeterministic = false;  // GPU decode: DecodeOptions::deterministic = false
  std::uint64_t seed = 1234;
  bool json = false;
  std::string out_file;
  // decode
  std::vector<std::string> kv_dtypes = {"bf16", "f32"};
  std::string q_dtype = "bf16";
  std::int64_t seq_len = 2048;
  bool standard_shapes = false;  // GPU: the BENCHMARKS.md decode table instead of one shape
  bool ragged = false;           // GPU decode: lengths uniform in [1, seq_len] instead of seq_len
  std::vector<std::string> seq_lens;  // GPU decode: LEN or LENxCOUNT items, the batch's lengths in order
  // prefill
  std::string dtype = "bf16";
  std::string kv_dtype;  // empty: dtype
  std::int64_t new_tokens = 2048;
  std::int64_t cached_tokens = 0;
  bool non_causal = false;
  // cascade
  std::int64_t shared_tokens = 16384;
  std::int64_t own_tokens = 256;
};

std::string number(const nlohmann::json& r, const char* key, const char* format) {
  const auto it = r.find(key);
  if (it == r.end() || !it->is_number()) return "-";
  return fmt::format(fmt::runtime(format), it->get<double>());
}

std::string text(const nlohmann::json& r, const char* key) {
  const auto it = r.find(key);
  if (it == r.end()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

void print_table(const std::vector<nlohmann::json>& records) {
  const bool tflops = !records.empty() && records.front().contains("achieved_tflops");
  Table table({"op", "variant", "q", "kv", "layout", "ps", "heads", "d", "batch", "lens", "median us", "min us",
               tflops ? "TFLOP/s" : "GB/s", "ceiling", "ratio"});
  for (const nlohmann::json& r : records) {
    table.add_row({text(r, "op"), text(r, "variant"), text(r, "dtype"), text(r, "kv_dtype"), text(r, "layout"), text(r, "page_size"),
                   fmt::format("{}/{}", text(r, "num_q_heads"), text(r, "num_kv_heads")),
                   text(r, "head_dim"), text(r, "batch"), text(r, "seq_lens_desc"),
                   number(r, "time_us_median", "{:.1f}"), number(r, "time_us_min", "{:.1f}"),
                   tflops ? number(r, "achieved_tflops", "{:.3f}") : number(r, "achieved_gbps", "{:.2f}"),
                   tflops ? number(r, "ceiling_tflops", "{:.3f}") : number(r, "ceiling_gbps", "{:.2f}"),
                   number(r, "ratio_to_ceiling", "{:.2f}")});
  }
  table.print(stdout, {0, 1, 2, 3, 4, 9});
}

// --out's file, opened before a benchmark runs: a path that cannot be written is reported
// before minutes of measuring, not after.
std::ofstream open_out_file(const BenchOptions& o) {
  std::ofstream out;
  if (o.out_file.empty()) return out;
  out.open(o.out_file);
  check_arg(out.good(), "--out: cannot open '" + o.out_file + "' for writing");
  return out;
}

int report(const BenchOptions& o, std::ofstream& out, const std::vector<nlohmann::json>& records) {
  if (o.json) {
    for (const nlohmann::json& r : records) fmt::print("{}\n", r.dump());
  } else {
    print_table(records);
  }
  if (!o.out_file.empty()) {
    for (const nlohmann::json& r : records) out << r.dump() << '\n';
    out.close();  // the buffered bytes reach the file (or fail: a full disk) here, not in the destructor
    check_arg(!out.fail(), "--out: writing '" + o.out_file + "' failed");
    if (!o.json) fmt::print("wrote {} record(s) to {}\n", records.size(), o.out_file);
  }
  return 0;
}

void require_cpu(const BenchOptions& o) {
  if (resolve_device(o.device).type != DeviceType::kCPU) {
    throw Error(ErrorCode::kUnsupported,
                "pagedattn bench: this benchmark has no GPU version in this build; use --device cpu");
  }
}

// Copies the shape options every benchmark shares (heads, head_dim, page size, layout) into a
// shape or config with those fields.
template <typename Shape>
void apply_shape_options(const BenchOptions& o, Shape& s) {
  const HeadCounts heads = parse_heads(o.heads);
  s.num_q_heads = heads.num_q_heads;
  s.num_kv_heads = heads.num_kv_heads;
  s.head_dim = o.head_dim;
  s.page_size = o.page_size;
  s.layout = parse_kv_layout(o.layout);
}

// Iterations and warm-up into a benchmark config when given; else it keeps its defaults.
template <typename Config>
void apply_timing_options(const BenchOptions& o, Config& c) {
  if (o.iters > 0) c.iterations = o.iters;
  if (o.warmup >= 0) c.warmup = o.warmup;
}

// Runs a benchmark, `run(progress)`, with a progress line on stderr, and reports its records.
template <typename Run>
int run_reported(const BenchOptions& o, Run&& run) {
  std::ofstream out = open_out_file(o);
  ProgressLine progress(stderr);
  const std::vector<nlohmann::json> records = run([&](const std::string& m) { progress.update(m); });
  progress.finish();
  return report(o, out, records);
}

constexpr std::int64_t kMaxSeqLen = 1 << 24, kMaxSequences = 1 << 20;

// One --seq-lens item, LEN or LENxCOUNT (e.g. 2112x33, COUNT sequences of LEN tokens): the empty
// string, or what is wrong with it.
std::string parse_seq_lens_item(const std::string& item, std::int64_t& len, std::int64_t& count) {
  const std::string bad = "'" + item + "' is not LEN or LENxCOUNT with LEN in [1, " +
                          std::to_string(kMaxSeqLen) + "] and COUNT in [1, " + std::to_string(kMaxSequences) + "]";
  count = 1;
  const char* const end = item.data() + item.size();
  const auto [after_len, len_error] = std::from_chars(item.data(), end, len);
  if (len_error != std::errc() || len < 1 || len > kMaxSeqLen) return bad;
  if (after_len == end) return {};
  if (*after_len != 'x') return bad;
  const auto [after_count, count_error] = std::from_chars(after_len + 1, end, count);
  if (count_error != std::errc() || after_count != end || count < 1 || count > kMaxSequences) return bad;
  return {};
}

#if defined(PAGEDATTN_BENCH_CUDA)
// --seq-lens' items as the batch's lengths in order.
std::vector<std::int64_t> lengths_from_items(const std::vector<std::string>& items) {
  std::vector<std::int64_t> lens;
  for (const std::string& item : items) {
    std::int64_t len = 0, count = 0;
    const std::string error = parse_seq_lens_item(item, len, count);
    check_arg(error.empty(), "--seq-lens: " + error);
    check_arg(count <= kMaxSequences - static_cast<std::int64_t>(lens.size()),
              "--seq-lens: more than " + std::to_string(kMaxSequences) + " sequences");
    lens.insert(lens.end(), static_cast<std::size_t>(count), len);
  }
  return lens;
}

// GPU decode: one shape per KV dtype from the options, or the whole BENCHMARKS.md table.
int run_cuda_decode(const BenchOptions& o, const Device& device) {
  bench::CudaDecodeBenchConfig c;
  c.device = device.index;
  apply_timing_options(o, c);
  c.graph = o.launch == "graph";
  c.deterministic = !o.nondeterministic;
  check_arg(!o.standard_shapes || o.partition_size == 0, "--partition-size: not with --standard-shapes");
  if (o.standard_shapes) {
    c.shapes = bench::standard_cuda_decode_shapes();
    for (bench::CudaDecodeShape& shape : c.shapes) shape.layout = parse_kv_layout(o.layout), shape.head_dim = o.head_dim;
  } else {
    for (const std::string& d : o.kv_dtypes) {
      bench::CudaDecodeShape shape;
      if (!o.seq_lens.empty()) {
        shape.lens = lengths_from_items(o.seq_lens);
        shape.name = fmt::format("b{}x[{}]", shape.lens.size(), fmt::join(o.seq_lens, ","));
      } else {
        const std::int64_t batch = o.batch > 0 ? o.batch : 16;
        shape.name = fmt::format("b{}x{}{}", batch, o.ragged ? "r" : "", o.seq_len);
        shape.lens = o.ragged ? bench::ragged_lengths(batch, o.seq_len, o.seed)
                              : std::vector<std::int64_t>(static_cast<std::size_t>(batch), o.seq_len);
      }
      apply_shape_options(o, shape);
      shape.kv_dtype = parse_dtype(d);
      shape.q_dtype = parse_dtype(o.q_dtype);
      shape.partition_size = o.partition_size;
      c.shapes.push_back(shape);
    }
  }
  return run_reported(o, [&](const auto& progress) { return bench::run_cuda_decode_bench(c, progress); });
}

// GPU prefill / append: one shape from the options, or the BENCHMARKS.md prefill table.
int run_cuda_prefill(const BenchOptions& o, const Device& device) {
  bench::CudaPrefillBenchConfig c;
  c.device = device.index;
  apply_timing_options(o, c);
  if (o.warmup_ms >= 0) c.warmup_ms = o.warmup_ms;
  if (o.standard_shapes) {
    c.shapes = bench::standard_cuda_prefill_shapes();
    for (bench::CudaPrefillShape& shape : c.shapes) shape.layout = parse_kv_layout(o.layout), shape.head_dim = o.head_dim;
  } else {
    bench::CudaPrefillShape shape;
    shape.batch = o.batch > 0 ? o.batch : 1;
    shape.new_tokens = o.new_tokens;
    shape.cached_tokens = o.cached_tokens;
    shape.name = fmt::format("{}x{}+{}", shape.batch, shape.new_tokens, shape.cached_tokens);
    apply_shape_options(o, shape);
    shape.dtype = parse_dtype(o.dtype);
    shape.kv_dtype = parse_dtype(o.kv_dtype.empty() ? o.dtype : o.kv_dtype);
    shape.causal = !o.non_causal;
    c.shapes.push_back(shape);
  }
  return run_reported(o, [&](const auto& progress) { return bench::run_cuda_prefill_bench(c, progress); });
}

// GPU cascade: sequences sharing one prefix, plain decode vs. the cascade.
int run_cuda_cascade(const BenchOptions& o, const Device& device) {
  bench::CudaCascadeBenchConfig c;
  c.device = device.index;
  apply_timing_options(o, c);
  if (o.batch > 0) c.num_seqs = o.batch;
  apply_shape_options(o, c);
  c.shared_tokens = o.shared_tokens;
  c.own_tokens = o.own_tokens;
  return run_reported(o, [&](const auto& progress) { return bench::run_cuda_cascade_bench(c, progress); });
}
#endif

// Copies the options the CPU benchmarks share into their config (DecodeBenchConfig,
// PrefillBenchConfig or CascadeBenchConfig); iterations, warm-up and batch keep the config's
// defaults when not given.
template <typename Config>
void apply_shared_options(const BenchOptions& o, Config& c) {
  c.num_threads = o.threads;
  apply_timing_options(o, c);
  apply_shape_options(o, c);
  if (o.batch > 0) c.batch = o.batch;
  c.seed = o.seed;
}

int run_cascade(const BenchOptions& o) {
  [[maybe_unused]] const Device device = resolve_device(o.device);
#if defined(PAGEDATTN_BENCH_CUDA)
  if (device.type == DeviceType::kCUDA) return run_cuda_cascade(o, device);
#endif
  require_cpu(o);
  bench::CascadeBenchConfig c;
  apply_shared_options(o, c);
  c.shared_tokens = o.shared_tokens;
  c.own_tokens = o.own_tokens;
  return run_reported(o, [&](const auto& progress) { return bench::run_cascade_bench(c, progress); });
}

int run_decode(const BenchOptions& o) {
#if defined(PAGEDATTN_BENCH_CUDA)
  if (const Device device = resolve_device(o.device); device.type == DeviceType::kCUDA) {
    return run_cuda_decode(o, device);
  }
#endif
  require_cpu(o);  // first: with --device cuda in a CPU-only build, that is the error to report
  check_arg(!o.standard_shapes, "--standard-shapes: only with --device cuda");
  check_arg(o.partition_size == 0, "--partition-size: only with --device cuda");
  check_arg(!o.ragged, "--ragged: only with --device cuda");
  check_arg(o.seq_lens.empty(), "--seq-lens: only with --device cuda");
  check_arg(o.launch == "graph", "--launch: only with --device cuda");
  check_arg(!o.nondeterministic, "--nondeterministic: only with --device cuda");
  bench::DecodeBenchConfig c;
  apply_shared_options(o, c);
  c.q_dtype = parse_dtype(o.q_dtype);
  c.kv_dtypes.clear();
  for (const std::string& d : o.kv_dtypes) c.kv_dtypes.push_back(parse_dtype(d));
  c.seq_len = o.seq_len;
  return run_reported(o, [&](const auto& progress) { return bench::run_decode_bench(c, progress); });
}

int run_prefill(const BenchOptions& o) {
#if defined(PAGEDATTN_BENCH_CUDA)
  if (const Device device = resolve_device(o.device); device.type == DeviceType::kCUDA) {
    return run_cuda_prefill(o, device);
  }
#endif
  check_arg(!o.standard_shapes, "--standard-shapes: only with --device cuda");
  check_arg(o.warmup_ms < 0, "--warmup-ms: only with --device cuda");
  require_cpu(o);
  bench::PrefillBenchConfig c;
  apply_shared_options(o, c);
  c.dtype = parse_dtype(o.dtype);
  c.kv_dtype = parse_dtype(o.kv_dtype.empty() ? o.dtype : o.kv_dtype);
  c.new_tokens = o.new_tokens;
  c.cached_tokens = o.cached_tokens;
  c.causal = !o.non_causal;
  return run_reported(o, [&](const auto& progress) { return bench::run_prefill_bench(c, progress); });
}

// The options that describe one shape, which a benchmark's --standard-shapes table replaces.
struct ShapeOptions {
  std::vector<CLI::Option*> options;
  // --standard-shapes refuses them (the table fixes every shape), all but --layout and
  // --head-dim, which the table takes.
  void excluded_by(CLI::Option* standard_shapes) const {
    for (CLI::Option* option : options) standard_shapes->excludes(option);
  }
};

// Options every benchmark takes.
ShapeOptions add_shared_options(CLI::App& cmd, BenchOptions& o, std::int64_t default_batch) {
  add_device_option(cmd, o.device);
  add_threads_option(cmd, o.threads);
  cmd.add_option("--iters", o.iters,
                 "Timed iterations, median and min over them (default: the benchmark's, 10 on the CPU and 50 or more on a GPU)")
      ->check(CLI::Range(1, 100000));
  cmd.add_option("--warmup", o.warmup, "Untimed warm-up iterations (default: the benchmark's)")
      ->check(CLI::Range(0, 1000));
  cmd.add_option("--layout", o.layout, "KV layout: nhd, hnd or vllm")
      ->check(CLI::IsMember({"nhd", "hnd", "vllm"}))->capture_default_str();
  ShapeOptions shape;
  shape.options.push_back(cmd.add_option("--page-size", o.page_size, "Tokens per page")
                              ->check(CLI::Range(1, 4096))->capture_default_str());
  shape.options.push_back(cmd.add_option("--heads", o.heads, "Query/KV heads, Q/KV (e.g. 32/8) or N")
                              ->check(heads_validator())->capture_default_str());
  cmd.add_option("--head-dim", o.head_dim, "Head dimension (a multiple of 8, at most 256; also of --standard-shapes' table)")
      ->check(CLI::Range(8, 256))->capture_default_str();
  shape.options.push_back(cmd.add_option("--batch", o.batch, fmt::format("Sequences (default {})", default_batch))
                              ->check(CLI::Range(1, 1 << 20)));
  cmd.add_option("--seed", o.seed, "Random seed")->capture_default_str();
  cmd.add_flag("--json", o.json, "Print one JSON record per line instead of the table");
  cmd.add_option("--out", o.out_file, "Also write the JSON records (one per line) to FILE");
  return shape;
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Measure decode, prefill or cascade attention beside the machine's measured ceiling");
  bench->require_subcommand(1);

  auto d = std::make_shared<BenchOptions>();
  CLI::App* decode = bench->add_subcommand(
      "decode", "Paged decode (default: GQA 32/8, d128, 16 x 2048 tokens, bf16 and f32 KV)");
  ShapeOptions decode_shape = add_shared_options(*decode, *d, 16);
  decode_shape.options.push_back(decode->add_option("--kv-dtype", d->kv_dtypes, "KV cache dtypes, comma separated")
                                     ->delimiter(',')->check(float_dtype_validator())->capture_default_str());
  decode_shape.options.push_back(decode->add_option("--q-dtype", d->q_dtype, "Query and output dtype: f32, f16 or bf16")
                                     ->check(CLI::IsMember({"f32", "f16", "bf16"}))->capture_default_str());
  decode_shape.options.push_back(decode->add_option("--seq-len", d->seq_len, "Tokens of KV per sequence")
                                     ->check(CLI::Range(1, 1 << 24))->capture_default_str());
  decode_shape.options.push_back(decode->add_flag("--ragged", d->ragged,
                                                  "GPU only: lengths uniform in [1, --seq-len] drawn with --seed instead "
                                                  "of --seq-len each (d-ragged's: --batch 128 --seq-len 8192 --seed 2024)"));
  CLI::Option* seq_lens =
      decode->add_option("--seq-lens", d->seq_lens,
                         "GPU only: the batch's lengths in order, as LEN or LENxCOUNT items, comma separated "
                         "(e.g. 2112x33,1984x31), instead of --batch, --seq-len and --ragged")
          ->delimiter(',')
          ->check(CLI::Validator(
              [](std::string& item) {  // the sequence count over all items is checked when the shape is built
                std::int64_t len = 0, count = 0;
                return parse_seq_lens_item(item, len, count);
              },
              "LEN[xCOUNT]"));
  for (const char* name : {"--batch", "--seq-len", "--ragged"}) seq_lens->excludes(decode->get_option(name));
  decode_shape.options.push_back(seq_lens);
  decode_shape.excluded_by(decode->add_flag("--standard-shapes", d->standard_shapes,
                                            "GPU only: run the whole decode table of BENCHMARKS.md (in --layout, at --head-dim)"));
  decode->add_option("--partition-size", d->partition_size,
                     "GPU only: split-K partition in tokens (0: the planner's choice)")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  decode->add_option("--launch", d->launch,
                     "GPU only: graph (each case captured once and replayed) or calls (decode called "
                     "directly between the timing events, as eager frameworks launch)")
      ->check(CLI::IsMember({"graph", "calls"}))->capture_default_str();
  decode->add_flag("--nondeterministic", d->nondeterministic,
                   "GPU only: decode with DecodeOptions::deterministic = false (warps balance their "
                   "tiles at run time; results may vary in their last bits)");
  decode->callback([&action, d] { action = [d] { return run_decode(*d); }; });

  auto p = std::make_shared<BenchOptions>();
  CLI::App* prefill = bench->add_subcommand(
      "prefill", "Paged prefill / append (default: 1 x 2048 new tokens, causal, GQA 32/8, bf16)");
  ShapeOptions prefill_shape = add_shared_options(*prefill, *p, 1);
  prefill_shape.options.push_back(prefill->add_option("--dtype", p->dtype, "Query and output dtype (and the cache's, unless --kv-dtype): f32, f16 or bf16")
                                      ->check(CLI::IsMember({"f32", "f16", "bf16"}))->capture_default_str());
  prefill_shape.options.push_back(prefill->add_option("--kv-dtype", p->kv_dtype, "KV cache dtype (default: --dtype's)")
                                      ->check(float_dtype_validator()));
  prefill_shape.options.push_back(prefill->add_option("--new-tokens", p->new_tokens, "Query tokens per sequence (the last of its KV)")
                                      ->check(CLI::Range(1, 1 << 20))->capture_default_str());
  prefill_shape.options.push_back(prefill->add_option("--cached-tokens", p->cached_tokens, "Tokens already in the cache before them")
                                      ->check(CLI::Range(0, 1 << 24))->capture_default_str());
  prefill_shape.options.push_back(prefill->add_flag("--non-causal", p->non_causal, "Let every query see every key"));
  prefill_shape.excluded_by(prefill->add_flag("--standard-shapes", p->standard_shapes,
                                              "GPU only: run the prefill / append table of BENCHMARKS.md, at page sizes 16 and 1, and over fp8 e4m3 caches at page 16 (in --layout, at --head-dim)"));
  prefill->add_option("--warmup-ms", p->warmup_ms,
                      "GPU only: warm up each shape at least this long, so that it is timed at the clock the "
                      "GPU's power limit lets it keep (default 500; 0: only the --warmup launches)")
      ->check(CLI::Range(0.0, 60000.0));
  prefill->callback([&action, p] { action = [p] { return run_prefill(*p); }; });

  auto c = std::make_shared<BenchOptions>();
  CLI::App* cascade = bench->add_subcommand(
      "cascade", "Sequences sharing one prefix's pages, plain decode vs. the cascade "
                 "(default: 64 x (16384 shared + 256 own), GQA 32/8, bf16)");
  add_shared_options(*cascade, *c, 64);
  cascade->add_option("--shared-tokens", c->shared_tokens, "Tokens of the shared prefix (whole pages are shared)")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  cascade->add_option("--own-tokens", c->own_tokens, "Tokens each sequence has after the prefix")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str();
  cascade->callback([&action, c] { action = [c] { return run_cascade(*c); }; });
}

}  // namespace pagedattn::cli
