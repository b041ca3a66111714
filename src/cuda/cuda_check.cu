#include <cstdlib>

#include "cuda/cuda_check.h"

namespace pagedattn::cuda {

void check_launch(const char* kernel, cudaStream_t stream, std::source_location where) {
  check_cuda(cudaGetLastError(), kernel, where);
  static const bool sync_check = std::getenv("PAGEDATTN_CUDA_SYNC_CHECK") != nullptr;
  if (sync_check) check_cuda(cudaStreamSynchronize(stream), kernel, where);
}

}  // namespace pagedattn::cuda
