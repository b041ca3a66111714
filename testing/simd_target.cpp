#include "simd_target.h"

#include <cstdint>
#include <cstdlib>

#include <hwy/targets.h>

namespace pagedattn::testing {

const SimdTargetRequest& simd_target_request() {
  static const SimdTargetRequest request = [] {
    SimdTargetRequest r;
    const char* env = std::getenv("PAGEDATTN_TEST_SIMD_TARGET");
    if (env == nullptr || *env == '\0') return r;
    r.name = env;
    r.available = false;
    for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
      if (r.name == hwy::TargetName(target)) {
        hwy::SetSupportedTargetsForTest(target);  // also resets the dispatch's chosen target
        r.available = true;
        break;
      }
    }
    return r;
  }();
  return request;
}

}  // namespace pagedattn::testing
