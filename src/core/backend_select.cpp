#include "core/backend_select.h"

#include <algorithm>
#include <array>
#include <string>

#include "pagedattn/config.h"
#include "pagedattn/error.h"

namespace pagedattn::detail {

namespace {
// The ops the CUDA backend implements; the others report Unsupported on a GPU context.
constexpr std::array<std::string_view, 8> kCudaOps = {"decode",      "prefill",     "cascade_decode",
                                                      "append_kv",   "copy_blocks", "swap_blocks",
                                                      "merge_state", "merge_states"};
}  // namespace

void require_backend(const Context& ctx, std::string_view op) {
  check_arg(ctx.num_threads >= 0, [&] {
    return "ctx.num_threads is " + std::to_string(ctx.num_threads) + ", expected >= 0 (0 = all hardware threads)";
  });
  if (ctx.device.type == DeviceType::kCPU) return;
  check_supported(kCudaBuilt, [&] {
    return std::string(op) +
           ": device cuda requested but pagedattn was built without CUDA "
           "(configure with -DPAGEDATTN_CUDA=ON on a machine with nvcc)";
  });
  check_supported(ctx.implementation == Implementation::kFast,
                  [&] { return std::string(op) + ": the reference implementation runs on the CPU only"; });
  check_supported(std::ranges::find(kCudaOps, op) != kCudaOps.end(),
                  [&] { return std::string(op) + " is not yet available on the CUDA backend"; });
}

}  // namespace pagedattn::detail
