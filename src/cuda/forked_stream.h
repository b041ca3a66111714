// Internal: a second stream beside the caller's, for work that can run concurrently with the
// caller's next launches (cascade decode's own-page levels beside its shared-prefix prefill).
#pragma once

#include <cuda_runtime.h>

namespace pagedattn::cuda {

// A second stream of this thread and the current device, with the events that fork it from and
// join it back to the caller's stream (capturable: the fork and join become graph edges). Kept
// for the thread's lifetime.
struct ForkedStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t forked = nullptr, joined = nullptr;
};
const ForkedStream& forked_stream();

// Whether work forked from `stream` may go to `side`: not when `side` still belongs to a capture
// that `stream` is not part of (a capture of another stream of this thread, not yet ended),
// since a fork would then cross capture boundaries.
bool side_stream_usable(cudaStream_t side, cudaStream_t stream);

// Joins the side stream back into the caller's stream once: explicitly on success, or on the
// way out when something throws after the fork (so the workspace, freed on the caller's stream
// after this object is gone, outlives the side stream's kernels, and a capture is not left with
// an unjoined fork). side == stream: nothing to join.
class SideJoin {
 public:
  SideJoin(const ForkedStream& fork, cudaStream_t side, cudaStream_t stream)
      : fork_(fork), side_(side), stream_(stream) {}
  SideJoin(const SideJoin&) = delete;
  SideJoin& operator=(const SideJoin&) = delete;
  ~SideJoin();
  void join();

 private:
  const ForkedStream& fork_;
  cudaStream_t side_, stream_;
  bool done_ = false;
};

}  // namespace pagedattn::cuda
