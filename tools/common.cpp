// Options and output helpers shared by the subcommands.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <charconv>
#include <string>

#include <fmt/core.h>

#include "cli.h"
#include "pagedattn/config.h"
#include "pagedattn/error.h"
#include "pagedattn/system_info.h"

namespace pagedattn::cli {

void add_device_option(CLI::App& cmd, std::string& device) {
  cmd.add_option("--device", device, "Where to run: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

void add_threads_option(CLI::App& cmd, int& threads) {
  cmd.add_option("--threads", threads, "CPU worker threads (0 = all hardware threads)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
}

CLI::Validator float_dtype_validator() {
  return CLI::IsMember({"f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2"});
}

namespace {
// Parses a whole string as a positive integer; false on anything else.
bool parse_positive(std::string_view text, std::int64_t& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc{} && ptr == end && value > 0;
}
}  // namespace

namespace {
// Why `text` is not a valid --heads value, or "" when it is (then `h` holds the counts).
std::string heads_problem(std::string_view text, HeadCounts& h) {
  const std::size_t slash = text.find('/');
  const bool ok = slash == std::string_view::npos
                      ? parse_positive(text, h.num_q_heads)
                      : parse_positive(text.substr(0, slash), h.num_q_heads) &&
                            parse_positive(text.substr(slash + 1), h.num_kv_heads);
  if (!ok) return fmt::format("'{}' is not Q/KV (e.g. 32/8) or N", text);
  if (slash == std::string_view::npos) h.num_kv_heads = h.num_q_heads;
  // The CUDA grids hold at most 65535 heads, and larger counts only exhaust memory on the CPU.
  constexpr std::int64_t kMaxHeads = 65535;
  if (h.num_q_heads > kMaxHeads) return fmt::format("{}: at most {} query heads", text, kMaxHeads);
  if (h.num_q_heads % h.num_kv_heads != 0) {
    return fmt::format("{}: the query heads ({}) must be a multiple of the KV heads ({})", text,
                       h.num_q_heads, h.num_kv_heads);
  }
  return {};
}
}  // namespace

HeadCounts parse_heads(std::string_view text) {
  HeadCounts h;
  const std::string problem = heads_problem(text, h);
  check_arg(problem.empty(), "--heads " + problem);
  return h;
}

CLI::Validator share_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double x = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, x);
        if (ec != std::errc{} || ptr != end || !(x >= 0.0 && x <= 1.0)) return "'" + text + "' is not a share in [0, 1]";
        return {};
      },
      "SHARE in [0, 1]");
}

CLI::Validator heads_validator() {
  return CLI::Validator(
      [](std::string& text) {
        HeadCounts h;
        return heads_problem(text, h);
      },
      "Q/KV");
}

Device resolve_device(std::string_view name) {
  if (name == "cpu") return Device::cpu();
  check_arg(name == "cuda", "unknown device '" + std::string(name) + "' (expected cpu or cuda)");
  check_supported(kCudaBuilt,
                  "--device cuda: this build of pagedattn has no CUDA backend (configure on a "
                  "machine with nvcc, with -DPAGEDATTN_CUDA=AUTO or ON)");
  check_supported(!cuda_devices().empty(),
                  "--device cuda: no usable GPU: " + cuda_unavailable_reason());
  return Device::cuda(0);
}

// ---- Table -------------------------------------------------------------------------------------

void Table::print(std::FILE* out, std::vector<int> left) const {
  std::vector<std::size_t> width(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  };
  widen(header_);
  for (const auto& row : rows_) widen(row);
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t c = 0; c < width.size(); ++c) {
      const std::string& cell = c < row.size() ? row[c] : std::string();
      const bool is_left = std::find(left.begin(), left.end(), static_cast<int>(c)) != left.end();
      if (c) line += "  ";
      line += is_left ? fmt::format("{:<{}}", cell, width[c]) : fmt::format("{:>{}}", cell, width[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print(out, "{}\n", line);
  };
  print_row(header_);
  std::size_t total = 0;
  for (std::size_t w : width) total += w;
  fmt::print(out, "{}\n", std::string(total + 2 * (width.empty() ? 0 : width.size() - 1), '-'));
  for (const auto& row : rows_) print_row(row);
}

// ---- ProgressLine -----------------------------------------------------------------------------

bool is_terminal(std::FILE* f) { return ::isatty(::fileno(f)) == 1; }

double now_seconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

ProgressLine::ProgressLine(std::FILE* out, int plain_every)
    : out_(out), tty_(is_terminal(out)), plain_every_(plain_every) {}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::update(const std::string& text) {
  ++updates_;
  if (!tty_) {
    if (plain_every_ > 0 && updates_ % plain_every_ == 0) fmt::print(out_, "{}\n", text);
    return;
  }
  // Redrawing more often than a screen refresh only costs time.
  const double now = now_seconds();
  if (last_draw_s_ >= 0 && now - last_draw_s_ < 0.05) return;
  last_draw_s_ = now;
  const std::size_t pad = last_width_ > text.size() ? last_width_ - text.size() : 0;
  fmt::print(out_, "\r{}{}", text, std::string(pad, ' '));
  std::fflush(out_);
  last_width_ = text.size();
}

void ProgressLine::finish() {
  if (tty_ && last_width_ > 0) {
    fmt::print(out_, "\r{}\r", std::string(last_width_, ' '));
    std::fflush(out_);
  }
  last_width_ = 0;
}

}  // namespace pagedattn::cli
