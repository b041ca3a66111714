// Test helpers for CUDA graph tests: a stream owned for a test's length, and a graph captured
// once from the calls made on it and replayed as often as a test needs.
#pragma once

#include <cuda_runtime.h>

#include "device_buffer.h"

namespace pagedattn::test {

class Stream {
 public:
  Stream() { cuda_ok(cudaStreamCreate(&stream_), "stream"); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class CapturedGraph {
 public:
  // Captures what `record()` enqueues on `stream` (nothing runs), instantiates it and waits for
  // the stream, so a test may check that capturing left its buffers alone.
  template <class Record>
  CapturedGraph(cudaStream_t stream, Record&& record) : stream_(stream) {
    cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
    try {
      record();
    } catch (...) {
      // End the capture, or the stream stays unusable for the rest of the test binary.
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);
      if (partial != nullptr) cudaGraphDestroy(partial);
      throw;
    }
    cudaGraph_t graph = nullptr;
    cuda_ok(cudaStreamEndCapture(stream, &graph), "end capture");
    const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);  // the executable graph keeps what it needs
    cuda_ok(instantiated, "instantiate");
    cuda_ok(cudaStreamSynchronize(stream), "sync");
  }
  ~CapturedGraph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  // Launches the graph on its stream and waits for it to finish.
  void replay() const {
    cuda_ok(cudaGraphLaunch(exec_, stream_), "replay");
    cuda_ok(cudaStreamSynchronize(stream_), "sync");
  }

 private:
  cudaStream_t stream_;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace pagedattn::test
