// The bad-input check the CUDA op tests share.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "device_buffer.h"
#include "pagedattn/error.h"

namespace pagedattn::test {

// `call` must throw the library's Error with a message containing `needle`. The device is then
// synchronised, so that the caller's comparison of its buffers sees anything the call might
// have launched before throwing.
template <class F>
void expect_error_then_sync(F&& call, const char* needle) {
  try {
    call();
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  cuda_ok(cudaDeviceSynchronize(), "sync");
}

}  // namespace pagedattn::test
