// Internal: the SM count the CUDA planners size their grids for.
#pragma once

#include "cuda/cuda_check.h"

namespace pagedattn::cuda {

inline int sm_count(int device) {
  int n = 0;
  check_cuda(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "SM count");
  return n;
}

}  // namespace pagedattn::cuda
