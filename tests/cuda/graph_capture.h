// The GPU tests' streams and captured graphs: the test-support handles, named in this namespace.
#pragma once

#include "cuda_handles.h"

namespace pagedattn::test {

using testing::CapturedGraph;
using testing::Stream;

}  // namespace pagedattn::test
