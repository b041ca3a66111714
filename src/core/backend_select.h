// Internal: checks that an op can run on the context's device before any work is done.
#pragma once

#include <string_view>

#include "pagedattn/context.h"

namespace pagedattn::detail {

// Throws Unsupported when `op` cannot run on ctx.device in this build (CUDA not built, or the
// op not yet available there) and InvalidArgument for a malformed context.
void require_backend(const Context& ctx, std::string_view op);

}  // namespace pagedattn::detail
