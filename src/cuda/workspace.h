// Internal: an op's device scratch. The caller's workspace when one is given (it must be large
// enough), else a stream-ordered allocation (legal inside graph capture) that is freed on the
// stream when this object goes away, also when the op throws halfway.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/cuda_check.h"

namespace pagedattn::cuda {

class Workspace {
 public:
  Workspace(std::size_t need, void* given, std::size_t given_bytes, cudaStream_t stream, const char* op)
      : stream_(stream) {
    if (need == 0) {
      ptr_ = static_cast<unsigned char*>(given);
      return;
    }
    if (given == nullptr) {
      check_cuda(cudaMallocAsync(&owned_, need, stream), op);
      ptr_ = static_cast<unsigned char*>(owned_);
      return;
    }
    check_arg(given_bytes >= need, "ctx.workspace has " + std::to_string(given_bytes) + " bytes, " + op +
                                       " needs " + std::to_string(need));
    // The kernels store partial states as 8- and 16-byte vectors.
    check_arg(reinterpret_cast<std::uintptr_t>(given) % 16 == 0,
              std::string("ctx.workspace must be 16-byte aligned (") + op + ")");
    ptr_ = static_cast<unsigned char*>(given);
  }
  ~Workspace() {
    if (owned_ != nullptr) cudaFreeAsync(owned_, stream_);  // an error here has no one to go to
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  unsigned char* get() const { return ptr_; }

 private:
  cudaStream_t stream_;
  void* owned_ = nullptr;
  unsigned char* ptr_ = nullptr;
};

}  // namespace pagedattn::cuda
