// `pagedattn demo --device cuda` in a build without the CUDA backend (demo_device.h).
#include "demo_device.h"

#include "pagedattn/error.h"

namespace pagedattn::cli::demo {

std::unique_ptr<DevicePool> make_device_pool(const KVPool&) {
  throw Error(ErrorCode::kUnsupported, "pagedattn demo --device cuda: this build has no CUDA backend");
}

}  // namespace pagedattn::cli::demo
