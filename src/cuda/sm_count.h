// Internal: the device attributes the CUDA planners size their grids by.
#pragma once

#include "cuda/cuda_check.h"

namespace pagedattn::cuda {

// Queried once per (attribute, device): each query is a driver call, and the planners run per
// layer and step.
int cached_device_attribute(cudaDeviceAttr attribute, int device);

inline int sm_count(int device) { return cached_device_attribute(cudaDevAttrMultiProcessorCount, device); }

// Compute capability 9.0 exactly: the only devices the sm_90a kernels run on.
inline bool is_sm90(int device) {
  return cached_device_attribute(cudaDevAttrComputeCapabilityMajor, device) == 9 &&
         cached_device_attribute(cudaDevAttrComputeCapabilityMinor, device) == 0;
}

}  // namespace pagedattn::cuda
