// System info from the CUDA runtime.
#include <cuda_runtime.h>

#include "pagedattn/system_info.h"

namespace pagedattn {

std::vector<GpuInfo> cuda_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a missing driver
    return {};
  }
  std::vector<GpuInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back({i, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                   static_cast<std::int64_t>(prop.totalGlobalMem)});
  }
  return out;
}

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("CUDA runtime: ") + cudaGetErrorString(err);
  }
  return count == 0 ? "no CUDA device found" : "";
}

}  // namespace pagedattn
