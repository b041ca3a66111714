#include "cuda/forked_stream.h"

#include <cstddef>
#include <vector>

#include "cuda/cuda_check.h"

namespace pagedattn::cuda {

const ForkedStream& forked_stream() {
  thread_local std::vector<ForkedStream> per_device;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "current device");
  if (per_device.size() <= static_cast<std::size_t>(device)) per_device.resize(static_cast<std::size_t>(device) + 1);
  ForkedStream& f = per_device[static_cast<std::size_t>(device)];
  if (f.stream == nullptr) {
    // Created once, possibly while the caller's stream is being captured: relaxed capture mode
    // lets these calls through whatever mode the capture uses. All three or none are kept.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    check_cuda(cudaThreadExchangeStreamCaptureMode(&mode), "capture mode");
    ForkedStream made;
    cudaError_t err = cudaStreamCreateWithFlags(&made.stream, cudaStreamNonBlocking);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&made.forked, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&made.joined, cudaEventDisableTiming);
    if (err != cudaSuccess) {
      if (made.joined) cudaEventDestroy(made.joined);
      if (made.forked) cudaEventDestroy(made.forked);
      if (made.stream) cudaStreamDestroy(made.stream);
    } else {
      f = made;
    }
    check_cuda(cudaThreadExchangeStreamCaptureMode(&mode), "capture mode");
    check_cuda(err, "side stream and events");
  }
  return f;
}

bool side_stream_usable(cudaStream_t side, cudaStream_t stream) {
  cudaStreamCaptureStatus side_status = cudaStreamCaptureStatusNone, status = cudaStreamCaptureStatusNone;
  unsigned long long side_id = 0, id = 0;
  check_cuda(cudaStreamGetCaptureInfo(side, &side_status, &side_id), "side stream capture status");
  if (side_status == cudaStreamCaptureStatusNone) return true;
  check_cuda(cudaStreamGetCaptureInfo(stream, &status, &id), "stream capture status");
  return side_status == cudaStreamCaptureStatusActive && status == cudaStreamCaptureStatusActive && side_id == id;
}

SideJoin::~SideJoin() {
  if (!done_ && side_ != stream_) {
    cudaEventRecord(fork_.joined, side_);  // errors ignored: an exception is on its way already
    cudaStreamWaitEvent(stream_, fork_.joined, 0);
  }
}

void SideJoin::join() {
  done_ = true;
  if (side_ == stream_) return;
  check_cuda(cudaEventRecord(fork_.joined, side_), "side stream join");
  check_cuda(cudaStreamWaitEvent(stream_, fork_.joined, 0), "side stream join");
}

}  // namespace pagedattn::cuda
