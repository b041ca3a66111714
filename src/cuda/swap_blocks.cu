// swap_blocks on CUDA: whole pages between a cache on this GPU and one in host memory (or
// another pool on this GPU), as strided 2-D copies of each run of consecutive pages.
#include <cuda_runtime.h>

#include "cuda/cache_writes.h"
#include "cuda/cuda_check.h"
#include "cuda/sm_count.h"

namespace pagedattn::cuda {

void copy_page_runs(std::span<const detail::PageRun> runs, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "current device");
  const auto max_pitch = static_cast<std::int64_t>(cached_device_attribute(cudaDevAttrMaxPitch, device));
  for (const detail::PageRun& r : runs) {
    if (r.src_pitch <= max_pitch && r.dst_pitch <= max_pitch) {
      check_cuda(cudaMemcpy2DAsync(r.dst, static_cast<std::size_t>(r.dst_pitch), r.src, static_cast<std::size_t>(r.src_pitch),
                                   static_cast<std::size_t>(r.bytes), static_cast<std::size_t>(r.pages),
                                   cudaMemcpyDefault, stream),
                 "swap_blocks copy");
      continue;
    }
    // Pages further apart than a 2-D copy's largest pitch: one copy per page.
    for (std::int64_t i = 0; i < r.pages; ++i) {
      check_cuda(cudaMemcpyAsync(r.dst + i * r.dst_pitch, r.src + i * r.src_pitch, static_cast<std::size_t>(r.bytes),
                                 cudaMemcpyDefault, stream),
                 "swap_blocks copy");
    }
  }
}

}  // namespace pagedattn::cuda
