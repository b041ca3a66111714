// System info when the CUDA backend is not built.
#include "pagedattn/system_info.h"

namespace pagedattn {

std::vector<GpuInfo> cuda_devices() { return {}; }
std::string cuda_unavailable_reason() { return "pagedattn was built without CUDA"; }

}  // namespace pagedattn
