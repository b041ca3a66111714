// `pagedattn info`: what this build contains and what this machine offers.
#include <string>

#include <fmt/core.h>
#include <fmt/format.h>

#include "cli.h"
#include "pagedattn/config.h"
#include "pagedattn/system_info.h"

namespace pagedattn::cli {
namespace {

int run_info() {
  const std::vector<std::string> targets = cpu_compiled_simd_targets();
  fmt::print("pagedattn {}\n", kVersion);
  fmt::print("  backends          cpu{}\n", kCudaBuilt ? ", cuda" : "");
  fmt::print("  cpu simd target   {}\n", cpu_simd_target());
  fmt::print("  compiled targets  {}\n", targets.empty() ? "(none)" : fmt::format("{}", fmt::join(targets, ", ")));
  fmt::print("  cpu bf16 products {}\n", cpu_bf16_products());
  fmt::print("  hardware threads  {}\n", cpu_hardware_threads());
  fmt::print("  last-level cache  {} MiB\n", cpu_last_level_cache_bytes() >> 20);
  const std::vector<GpuInfo> gpus = cuda_devices();
  if (gpus.empty()) {
    fmt::print("  gpus              none ({})\n", cuda_unavailable_reason());
    return 0;
  }
  fmt::print("  gpus              {}\n", gpus.size());
  for (const GpuInfo& g : gpus) {
    fmt::print("    [{}] {}  sm_{}{}  {} SMs  {:.1f} GiB\n", g.index, g.name, g.compute_major,
               g.compute_minor, g.num_sms, static_cast<double>(g.memory_bytes) / (1u << 30));
  }
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand(
      "info", "Print the version, the backends built, the CPU SIMD target and the GPUs seen");
  cmd->callback([&action] { action = run_info; });
}

}  // namespace pagedattn::cli
