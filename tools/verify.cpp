// `pagedattn verify`: runs the standard attention case table through the library on the chosen
// device and compares every output with the double-precision dense reference.
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "attention_case.h"
#include "cli.h"
#include "pagedattn/error.h"

namespace pagedattn::cli {
namespace {

struct VerifyOptions {
  std::string device = "cpu";
  int threads = 0;
  bool quick = false;
  std::string filter;
  int random = 0;  // > 0: that many random cases instead of the table
  std::uint64_t seed = 1;
};

constexpr std::size_t kMaxDescription = 72;

std::string sci(double x) { return fmt::format("{:.2e}", x); }

// Long ragged batches make descriptions wide; the table keeps their start, failures print all.
std::string shorten(std::string text) {
  if (text.size() > kMaxDescription) text = text.substr(0, kMaxDescription - 3) + "...";
  return text;
}

int run_verify(const VerifyOptions& o) {
  Context ctx;
  ctx.device = resolve_device(o.device);
  ctx.num_threads = o.threads;
  // The case table builds its caches in host memory; on a GPU each case runs over device
  // mirrors of them (testing/case_on_gpu.cpp) against the same reference.

  std::vector<testing::AttentionCase> cases;
  for (testing::AttentionCase& c : o.random > 0 ? testing::random_cases(o.random, o.seed) : testing::standard_cases(o.quick)) {
    // Names are group names ("layout-dtype", "variant", ...); the description has the shapes.
    const bool match = o.filter.empty() || c.name.find(o.filter) != std::string::npos ||
                       testing::describe(c).find(o.filter) != std::string::npos;
    if (match) cases.push_back(std::move(c));
  }
  if (cases.empty()) {  // a usage problem (exit 2), not a failed check (exit 1)
    fmt::print(stderr, "pagedattn verify: no case matches '{}'\n", o.filter);
    return 2;
  }

  Table table({"#", "group", "case", "max abs err", "lse err", "nmse", "result"});
  std::vector<std::string> failures;
  int passed = 0;
  ProgressLine progress(stderr);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const testing::AttentionCase& c = cases[i];
    progress.update(fmt::format("case {}/{}: {}", i + 1, cases.size(), c.name));
    testing::CaseResult r;
    try {
      r = testing::run_case(c, ctx);
    } catch (const Error& e) {
      // A case the backend rejects is a failure of that case, not of the whole run.
      r.passed = false;
      r.message = fmt::format("error ({}): {}", to_string(e.code()), e.what());
    }
    passed += r.passed ? 1 : 0;
    table.add_row({fmt::format("{}", i + 1), c.name, shorten(testing::describe(c)), sci(r.max_abs_error),
                   sci(r.max_lse_error), sci(r.nmse), r.passed ? "PASS" : "FAIL"});
    if (!r.passed) {
      failures.push_back(fmt::format("#{} {}: {}\n    {}", i + 1, c.name, testing::describe(c), r.message));
    }
  }
  progress.finish();

  table.print(stdout, {1, 2});
  if (!failures.empty()) {
    fmt::print("\nfailures:\n");
    for (const std::string& f : failures) fmt::print("  {}\n", f);
  }
  const int failed = static_cast<int>(cases.size()) - passed;
  const std::string what = o.random > 0 ? fmt::format("{} random cases, seed {}", o.random, o.seed)
                           : o.quick      ? "quick table"
                                          : "full table";
  fmt::print("\n{} passed, {} failed ({} on {}{})\n", passed, failed, what, o.device,
             o.filter.empty() ? "" : fmt::format(", filter '{}'", o.filter));
  return failed == 0 ? 0 : 1;
}

}  // namespace

void add_verify_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<VerifyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Check every layout, dtype, page size and variant against the double-precision reference");
  add_device_option(*cmd, o->device);
  add_threads_option(*cmd, o->threads);
  CLI::Option* quick = cmd->add_flag("--quick", o->quick, "Run the representative subset of the case table");
  CLI::Option* random =
      cmd->add_option("--random", o->random, "Run this many random cases (any head_dim, every op, layout and dtype) instead of the table")
          ->check(CLI::Range(1, 1000000))
          ->excludes(quick);
  cmd->add_option("--seed", o->seed, "Seed of --random's cases")->capture_default_str()->needs(random);
  cmd->add_option("--filter", o->filter,
                  "Only cases whose group or description contains this text (e.g. vllm, fp8, prefill)");
  cmd->callback([&action, o] { action = [o] { return run_verify(*o); }; });
}

}  // namespace pagedattn::cli
