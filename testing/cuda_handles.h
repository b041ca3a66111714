// Owners of the CUDA streams, events and graphs that the GPU tests and benchmarks make, so a step
// that throws (a failed op, an error from the driver) releases what came before it and leaves
// the stream usable. Header-only; included only where the CUDA backend is built. Errors throw
// Error(kCuda).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "pagedattn/error.h"

namespace pagedattn::testing {

inline void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(ErrorCode::kCuda, std::string(what) + ": " + cudaGetErrorString(err));
}

class Stream {
 public:
  Stream() { cuda_check(cudaStreamCreate(&stream_), "stream"); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  operator cudaStream_t() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Events {
 public:
  explicit Events(std::size_t count) : events_(count, nullptr) {
    for (cudaEvent_t& e : events_) {
      const cudaError_t err = cudaEventCreate(&e);
      if (err != cudaSuccess) {
        destroy();
        cuda_check(err, "event");
      }
    }
  }
  ~Events() { destroy(); }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  cudaEvent_t operator[](std::size_t i) const { return events_[i]; }
  std::size_t size() const { return events_.size(); }

 private:
  void destroy() {
    for (cudaEvent_t e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  }
  std::vector<cudaEvent_t> events_;
};

// A graph captured once from what `record()` enqueues on a stream (nothing runs then),
// instantiated, and replayed as often as wanted.
class CapturedGraph {
 public:
  // Waits for the stream after instantiating, so a caller may check that capturing left its
  // buffers alone.
  template <class Record>
  CapturedGraph(cudaStream_t stream, Record&& record) : stream_(stream) {
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
    try {
      record();
    } catch (...) {
      // End the capture, or the stream stays unusable for the rest of the program.
      abandon_capture();
      throw;
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    if (ended != cudaSuccess) throw_clearing(ended, "end capture");
    const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);  // the executable graph keeps what it needs
    if (instantiated != cudaSuccess) throw_clearing(instantiated, "instantiate");
    const cudaError_t synced = cudaStreamSynchronize(stream);
    if (synced != cudaSuccess) {
      // The destructor does not run for a constructor that throws.
      cudaGraphExecDestroy(exec_);
      cuda_check(synced, "sync");
    }
  }
  ~CapturedGraph() { cudaGraphExecDestroy(exec_); }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  cudaGraphExec_t exec() const { return exec_; }

  // Launches the graph on its stream and waits for it to finish.
  void replay() const {
    cuda_check(cudaGraphLaunch(exec_, stream_), "replay");
    cuda_check(cudaStreamSynchronize(stream_), "sync");
  }

 private:
  void abandon_capture() {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(stream_, &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
    static_cast<void>(cudaGetLastError());  // see throw_clearing; the caller's exception says why
  }
  // A capture that failed also leaves the thread's last error set (to what invalidated it, or to
  // the failure itself), which a later launch check (cudaGetLastError) would report as its own.
  // It is cleared here, and named in the message when it says more than `err` does.
  [[noreturn]] static void throw_clearing(cudaError_t err, const char* what) {
    const cudaError_t cause = cudaGetLastError();
    std::string message = std::string(what) + ": " + cudaGetErrorString(err);
    if (cause != cudaSuccess && cause != err) message += std::string(" (first: ") + cudaGetErrorString(cause) + ")";
    throw Error(ErrorCode::kCuda, message);
  }

  cudaStream_t stream_;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace pagedattn::testing
