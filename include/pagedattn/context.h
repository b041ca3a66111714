// pagedattn — where and how an op runs.
#pragma once

#include <cstddef>
#include <span>

#include "pagedattn/tensor.h"

namespace pagedattn {

enum class Implementation : unsigned char {
  kFast,       // the backend's optimised kernels
  kReference,  // the scalar, double-accumulating reference (CPU only): slow, exact, the oracle
};

struct Context {
  Device device = Device::cpu();
  void* stream = nullptr;     // cudaStream_t for CUDA; ignored on the CPU
  int num_threads = 0;        // CPU worker threads; 0 = all hardware threads
  Implementation implementation = Implementation::kFast;
  // Optional scratch memory on `device` for CUDA split-K decode (f32 partial states) and for
  // CUDA prefill of what its tensor-core kernels do not take, e.g. f32 q (12 bytes per query
  // token); 16-byte aligned, as cudaMalloc's pointers are. When empty, the op allocates it
  // stream-ordered on ctx.stream (also legal inside graph capture).
  // The CPU backend manages its own scratch and ignores this.
  std::span<std::byte> workspace{};

  static Context cpu(int num_threads = 0) { return Context{Device::cpu(), nullptr, num_threads}; }
};

}  // namespace pagedattn
