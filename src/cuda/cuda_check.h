// Internal: turning CUDA runtime errors into pagedattn::Error, and the one launch check.
#pragma once

#include <cuda_runtime.h>

#include <source_location>
#include <string>

#include "pagedattn/error.h"

namespace pagedattn::cuda {

inline void check_cuda(cudaError_t err, const char* what,
                       std::source_location where = std::source_location::current()) {
  if (err != cudaSuccess) {
    throw Error(ErrorCode::kCuda, std::string(what) + ": " + cudaGetErrorString(err), where);
  }
}

// Call right after a kernel launch: reports launch-configuration errors at the launch site.
// With PAGEDATTN_CUDA_SYNC_CHECK set in the environment it also synchronises, so an error
// inside the kernel is reported by the op that caused it (a debugging aid; never in graphs).
void check_launch(const char* kernel, cudaStream_t stream,
                  std::source_location where = std::source_location::current());

// Raises `kernel`'s dynamic shared memory limit to `bytes` on the current device, once per
// (kernel, device): the attribute is per device, and each setting is a driver call. The error,
// if any, is also left for check_launch to report.
cudaError_t allow_dynamic_shared_memory(const void* kernel, int bytes);

}  // namespace pagedattn::cuda
