// CaseFixture::run on a GPU in a build without the CUDA backend.
#include "paged_fixture.h"
#include "pagedattn/error.h"

namespace pagedattn::testing {

void CaseFixture::run_on_gpu(const Context&) {
  throw Error(ErrorCode::kUnsupported, "this build of pagedattn has no CUDA backend");
}

}  // namespace pagedattn::testing
