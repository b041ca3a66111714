#include "core/backend_select.h"

#include <string>

#include "pagedattn/config.h"
#include "pagedattn/error.h"

namespace pagedattn::detail {

void require_backend(const Context& ctx, std::string_view op) {
  check_arg(ctx.num_threads >= 0, "ctx.num_threads is " + std::to_string(ctx.num_threads) +
                                      ", expected >= 0 (0 = all hardware threads)");
  if (ctx.device.type == DeviceType::kCPU) return;
  check_supported(kCudaBuilt, std::string(op) +
                                  ": device cuda requested but pagedattn was built without CUDA "
                                  "(configure with -DPAGEDATTN_CUDA=ON on a machine with nvcc)");
  check_supported(ctx.implementation == Implementation::kFast,
                  std::string(op) + ": the reference implementation runs on the CPU only");
  check_supported(op == "decode", std::string(op) + " is not yet available on the CUDA backend");
}

}  // namespace pagedattn::detail
