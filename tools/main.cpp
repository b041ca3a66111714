// pagedattn: paged KV-cache attention from the command line.
//
//   pagedattn demo      continuous batching of synthetic requests, every output verified
//   pagedattn verify    the standard case table against the double-precision reference
//   pagedattn bench     decode / prefill benchmarks beside the machine's measured ceiling
//   pagedattn info      version, backends, SIMD target, threads, GPUs
//
// Exit codes: 0 success, 1 a check failed (mismatch, failed case), 2 bad usage or a library
// error (the message on stderr says which argument and why).
#include <cstdio>
#include <exception>
#include <new>

#include <fmt/core.h>

#include "cli.h"
#include "pagedattn/config.h"
#include "pagedattn/error.h"

namespace pagedattn::cli {
namespace {

constexpr int kExitUsage = 2;

int run(int argc, char** argv) {
  CLI::App app{fmt::format("pagedattn {}: paged KV-cache attention for LLM serving", kVersion),
               "pagedattn"};
  app.set_version_flag("--version", std::string(kVersion));
  app.require_subcommand(1);
  app.fallthrough(false);

  Action action;
  add_demo_command(app, action);
  add_verify_command(app, action);
  add_bench_command(app, action);
  add_info_command(app, action);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A first word that names no command: CLI11 would only say that one is required.
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && argc > 1 && argv[1][0] != '-') {
      fmt::print(stderr, "pagedattn: unknown command '{}' (expected demo, verify, bench or info; see --help)\n", argv[1]);
      return kExitUsage;
    }
    // --help and --version arrive here too; CLI11 prints them and returns 0 for them.
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  if (!action) return kExitUsage;  // unreachable: a subcommand is required
  return action();
}

}  // namespace
}  // namespace pagedattn::cli

int main(int argc, char** argv) {
  try {
    return pagedattn::cli::run(argc, argv);
  } catch (const pagedattn::Error& e) {
    // what() already names the error code, the argument and where it was raised.
    fmt::print(stderr, "error: {}\n", e.what());
  } catch (const CLI::Error& e) {
    // A usage problem found after parsing (e.g. by a subcommand's own consistency checks).
    fmt::print(stderr, "pagedattn: {}\n", e.what());
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "pagedattn: out of memory (try fewer pages or smaller shapes)\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "pagedattn: unexpected error: {}\n", e.what());
  }
  return pagedattn::cli::kExitUsage;
}
