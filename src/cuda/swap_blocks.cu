// swap_blocks on CUDA: whole pages between a cache on this GPU and one in host memory (or
// another pool on this GPU), as strided 2-D copies of each run of consecutive pages.
#include <cuda_runtime.h>

#include "cuda/cache_writes.h"
#include "cuda/cuda_check.h"

namespace pagedattn::cuda {

void copy_page_runs(std::span<const detail::PageRun> runs, void* stream) {
  for (const detail::PageRun& r : runs) {
    check_cuda(cudaMemcpy2DAsync(r.dst, static_cast<std::size_t>(r.dst_pitch), r.src, static_cast<std::size_t>(r.src_pitch),
                                 static_cast<std::size_t>(r.bytes), static_cast<std::size_t>(r.pages), cudaMemcpyDefault,
                                 static_cast<cudaStream_t>(stream)),
               "swap_blocks copy");
  }
}

}  // namespace pagedattn::cuda
