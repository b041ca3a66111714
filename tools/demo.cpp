// `pagedattn demo`: options, their consistency checks, and the summary of a run.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "cli.h"
#include "demo.h"
#include "pagedattn/error.h"
#include "pagedattn/system_info.h"

namespace pagedattn::cli::demo {
namespace {

Geometry resolve_geometry(const DemoOptions& o) {
  Geometry g;
  const HeadCounts heads = parse_heads(o.heads);
  g.num_q_heads = heads.num_q_heads;
  g.num_kv_heads = heads.num_kv_heads;
  g.head_dim = o.head_dim;
  g.page_size = o.page_size;
  g.num_pages = o.num_pages;
  g.q_dtype = parse_dtype(o.q_dtype);
  g.kv_dtype = parse_dtype(o.kv_dtype);
  g.layout = parse_kv_layout(o.layout);
  check_arg(g.head_dim % 8 == 0,
            fmt::format("--head-dim {}: expected a multiple of 8 (at most 256)", g.head_dim));
  // Every request must fit the pool on its own, or it could never be scheduled.
  const std::int64_t longest = o.max_prompt + o.max_output;
  const std::int64_t pages_needed = (longest + g.page_size - 1) / g.page_size;
  check_arg(pages_needed <= g.num_pages,
            fmt::format("--num-pages {}: the longest request (--max-prompt {} + --max-output {} = {} "
                        "tokens) needs {} pages of {} tokens",
                        g.num_pages, o.max_prompt, o.max_output, longest, pages_needed, g.page_size));
  return g;
}

std::string pct(double x) { return fmt::format("{:.1f}%", x); }
std::string count(std::int64_t x) { return fmt::format("{}", x); }

void print_summary(const Geometry& g, const DemoStats& s) {
  const double steps = static_cast<double>(std::max<std::int64_t>(s.steps, 1));
  const double paged = s.sum_paged_slots / steps;
  const double contiguous = s.sum_contiguous_slots / steps;
  const double logical = s.sum_logical_tokens / steps;
  auto share = [](double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; };

  Table t({"metric", "value"});
  t.add_row({"requests (+ forked sequences)", fmt::format("{} (+{})", s.requests, s.forks)});
  t.add_row({"sequences finished", fmt::format("{}/{}", s.sequences_done, s.sequences_planned)});
  t.add_row({"prompt tokens", count(s.prompt_tokens)});
  t.add_row({"prompt tokens computed", fmt::format("{} (prefix hits and recompute included)",
                                                   s.prefill_tokens_computed)});
  t.add_row({"generated tokens", count(s.generated_tokens)});
  t.add_row({"steps", count(s.steps)});
  t.add_row({"preemptions (recomputed)", count(s.preemptions)});
  t.add_row({"peak pages used", fmt::format("{}/{} ({})", s.peak_pages_used, g.num_pages,
                                            pct(share(static_cast<double>(s.peak_pages_used),
                                                      static_cast<double>(g.num_pages))))});
  t.add_row({"KV slots held (avg): paged / contiguous", fmt::format("{:.0f} / {:.0f}", paged, contiguous)});
  t.add_row({"memory waste of contiguous max-length", pct(100.0 - share(paged, contiguous))});
  t.add_row({"tokens per paged slot (sharing)", fmt::format("{:.2f}", paged > 0 ? logical / paged : 0.0)});
  t.add_row({"internal fragmentation (avg)", pct(s.sum_fragmentation_pct / steps)});
  t.add_row({"prefix-cache hit rate", fmt::format("{} ({}/{} pages)", pct(100.0 * s.prefix_hit_rate),
                                                  s.prefix_pages_hit, s.prefix_pages_queried)});
  t.add_row({"prefix tokens written late", count(s.prefix_tokens_rewritten)});
  t.add_row({"forks / copy-on-write copies", fmt::format("{} / {}", s.forks, s.cow_copies)});
  const double secs = s.attention_seconds > 0 ? s.attention_seconds : 1e-9;
  t.add_row({"attention calls (fast)", fmt::format("{} in {:.3f} s", s.attention_calls, s.attention_seconds)});
  t.add_row({"attention throughput", fmt::format("{:.0f} tokens/s, {:.2f} GB/s of KV read",
                                                 static_cast<double>(s.attention_query_tokens) / secs,
                                                 s.attention_kv_bytes / secs / 1e9)});
  t.add_row({"outputs verified / mismatches", fmt::format("{}/{} / {}", s.outputs_verified,
                                                          s.outputs_total, s.output_mismatches)});
  t.add_row({"max abs error vs reference", fmt::format("{:.2e} (tolerance {:.1e} abs+rel)", s.max_abs_error,
                                                       output_tolerance(g.q_dtype, g.kv_dtype))});
  t.add_row({"KV read-back tokens / mismatches", fmt::format("{} / {}", s.kv_tokens_checked, s.kv_mismatches)});
  t.add_row({"cache integrity checks", count(s.integrity_checks)});
  if (s.device_pool_checks > 0) {
    t.add_row({"GPU pool == host pool (byte checks)", count(s.device_pool_checks)});
  }
  t.add_row({"wall time", fmt::format("{:.2f} s", s.wall_seconds)});
  t.print(stdout);
}

// Where the fast ops run: the CPU's SIMD target, or the GPU's name.
std::string device_label(const DemoOptions& o) {
  if (resolve_device(o.device).type == DeviceType::kCPU) return "cpu";
  const std::vector<GpuInfo> gpus = cuda_devices();
  return "cuda (" + gpus.front().name + ")";
}

int run_demo(const DemoOptions& o) {
  const std::string device = device_label(o);
  const Geometry g = resolve_geometry(o);
  fmt::print("pagedattn demo on {}: {} requests, KV {} {} page size {} x {} pages, heads {}/{} d{}, q {}, "
             "token budget {}, {} page tables\n\n",
             device, o.requests, o.kv_dtype, o.layout, g.page_size, g.num_pages, g.num_q_heads,
             g.num_kv_heads, g.head_dim, o.q_dtype, o.token_budget, o.page_table);
  std::fflush(stdout);  // before the progress line on stderr
  ProgressLine progress(stderr, 100);
  const DemoStats s = run_serving_loop(o, g, [&](const std::string& line) { progress.update(line); });
  progress.finish();
  print_summary(g, s);

  const bool all_done = s.sequences_done == s.sequences_planned;
  const bool clean = s.output_mismatches == 0 && s.kv_mismatches == 0;
  if (clean && all_done) {
    fmt::print("\nOK: {} attention outputs verified against the reference, cache contents intact\n",
               s.outputs_verified);
    return 0;
  }
  fmt::print("\nFAILED: {} output mismatches, {} KV mismatches, {}/{} sequences finished\n",
             s.output_mismatches, s.kv_mismatches, s.sequences_done, s.sequences_planned);
  return 1;
}

}  // namespace
}  // namespace pagedattn::cli::demo

namespace pagedattn::cli {

void add_demo_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<demo::DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Serve synthetic requests with continuous batching over the paged KV cache, "
              "checking every attention output against the reference");
  add_device_option(*cmd, o->device);
  add_threads_option(*cmd, o->threads);
  cmd->add_option("--requests", o->requests, "Requests to serve")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the synthetic workload")->capture_default_str();
  cmd->add_option("--page-size", o->page_size, "Tokens per page")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--num-pages", o->num_pages, "Pages in the KV pool")
      ->check(CLI::Range(1, 1 << 22))->capture_default_str();
  cmd->add_option("--token-budget", o->token_budget, "Query tokens per step (decodes + prefill chunks)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--kv-dtype", o->kv_dtype, fmt::format("KV cache dtype: {}", kDtypeNames))
      ->check(float_dtype_validator())->capture_default_str();
  cmd->add_option("--q-dtype", o->q_dtype, "Query and output dtype: f32, f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))->capture_default_str();
  cmd->add_option("--layout", o->layout, "KV layout: nhd, hnd or vllm")
      ->check(CLI::IsMember({"nhd", "hnd", "vllm"}))->capture_default_str();
  cmd->add_option("--page-table", o->page_table, "Page-table format: block, csr, or alternate by step")
      ->check(CLI::IsMember({"block", "csr", "alternate"}))->capture_default_str();
  cmd->add_option("--heads", o->heads, "Query/KV heads, Q/KV (e.g. 8/2) or N")
      ->check(heads_validator())->capture_default_str();
  cmd->add_option("--head-dim", o->head_dim, "Head dimension (a multiple of 8, at most 256)")
      ->check(CLI::Range(8, 256))->capture_default_str();
  cmd->add_option("--max-prompt", o->max_prompt, "Longest prompt, in tokens")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--max-output", o->max_output, "Most tokens a request generates")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--shared-prefix-share", o->shared_prefix_share,
                  "Share of requests that start with a common system prompt (prefix-cache hits)")
      ->check(share_validator())->capture_default_str();
  cmd->add_option("--fork-share", o->fork_share,
                  "Share of requests sampled twice: forked after the prompt, pages copied on write")
      ->check(share_validator())->capture_default_str();
  cmd->add_option("--verify-every", o->verify_every,
                  "Compare attention with the reference every N steps (0 = never)")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  cmd->add_flag("--no-prefix-caching", o->no_prefix_caching, "Turn the prefix cache off");
  cmd->callback([&action, o] { action = [o] { return demo::run_demo(*o); }; });
}

}  // namespace pagedattn::cli
