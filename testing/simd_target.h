// Test support: runs a test process on a lower SIMD target than the machine's best, so that
// the kernels of every compiled target are tested on one machine (a test run otherwise covers
// only the target the dispatch picks there).
#pragma once

#include <string>

namespace pagedattn::testing {

// PAGEDATTN_TEST_SIMD_TARGET names a Highway target ("SSE4", "SCALAR", ...; `pagedattn info`
// lists the compiled ones). The first call applies it to the library's dispatch; `available`
// is false when the target is not compiled in or not supported by this CPU.
struct SimdTargetRequest {
  std::string name;  // empty: nothing requested
  bool available = true;
};
const SimdTargetRequest& simd_target_request();

}  // namespace pagedattn::testing
