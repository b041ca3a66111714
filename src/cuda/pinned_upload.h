// Internal: small host-to-device uploads through page-locked staging buffers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace pagedattn::cuda {

// Copies `bytes` from host memory `src` to device memory `dst` on `stream`, asynchronously: the
// data is staged in one of a few page-locked buffers of this thread and device, so the host
// returns at once (a copy from pageable memory may wait for the stream's earlier work, which
// would keep the host from preparing the next call while the GPU runs this one), and a small
// kernel on `stream` reads it from there over the bus (a DMA copy where the buffer is not
// mapped). A buffer is reused only after its previous copy has completed. Not for a stream
// being captured (the graph would read the buffer when replayed, after later calls have
// refilled it).
void upload_staged(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

}  // namespace pagedattn::cuda
