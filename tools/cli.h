// The `pagedattn` command-line program: the pieces its subcommands share.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "pagedattn/context.h"
#include "pagedattn/dtype.h"
#include "pagedattn/kv_cache.h"

namespace pagedattn::cli {

// What the chosen subcommand does once the command line has been parsed; returns the exit code.
// Running it outside of CLI11's parse keeps library errors apart from usage errors.
using Action = std::function<int()>;

void add_demo_command(CLI::App& app, Action& action);
void add_verify_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_info_command(CLI::App& app, Action& action);

// ---- options shared by several subcommands ----------------------------------------------------

inline constexpr std::string_view kDtypeNames = "f32, f16, bf16, fp8_e4m3, fp8_e5m2";

// --device cpu|cuda and --threads N, bound to `device` / `threads`.
void add_device_option(CLI::App& cmd, std::string& device);
void add_threads_option(CLI::App& cmd, int& threads);
// --kv-dtype style options: the value must name a float dtype.
CLI::Validator float_dtype_validator();
// --heads Q/KV (or a single N for multi-head attention).
CLI::Validator heads_validator();
// A share in [0, 1] (CLI::Range lets NaN through: every comparison with it is false).
CLI::Validator share_validator();

struct HeadCounts {
  std::int64_t num_q_heads = 0;
  std::int64_t num_kv_heads = 0;
};
HeadCounts parse_heads(std::string_view text);

// The device named on the command line, checked against what this build and machine offer:
// throws Error(kUnsupported) with the reason when CUDA was not built or sees no GPU.
Device resolve_device(std::string_view name);

// ---- output helpers ---------------------------------------------------------------------------

// A plain text table with right-aligned numeric columns, printed in one go.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns whose index is in `left` are left-aligned (names); the rest right-aligned.
  void print(std::FILE* out, std::vector<int> left = {0}) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// One status line that rewrites itself on a terminal and prints every `plain_every`-th update as
// its own line otherwise (logs of a CI job stay short but still show that work is progressing).
class ProgressLine {
 public:
  explicit ProgressLine(std::FILE* out, int plain_every = 0);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  void update(const std::string& text);
  // Ends the line so the next output starts on a fresh one.
  void finish();

 private:
  std::FILE* out_;
  bool tty_;
  int plain_every_;
  long updates_ = 0;
  std::size_t last_width_ = 0;
  double last_draw_s_ = -1.0;
};

bool is_terminal(std::FILE* f);
// Seconds on a monotonic clock.
double now_seconds();

}  // namespace pagedattn::cli
