// Internal: the device attributes the CUDA planners size their grids by.
#pragma once

#include "cuda/cuda_check.h"

namespace pagedattn::cuda {

// Queried once per (attribute, device): each query is a driver call, and the planners run per
// layer and step.
int cached_device_attribute(cudaDeviceAttr attribute, int device);

inline int sm_count(int device) { return cached_device_attribute(cudaDevAttrMultiProcessorCount, device); }

}  // namespace pagedattn::cuda
