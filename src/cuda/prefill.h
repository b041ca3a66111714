// Internal: paged prefill / append on CUDA. The host checks the problem against the kernel's
// reach and sizes the grid from host-side query counts; the launch reads only device memory.
#pragma once

#include <cstdint>

#include "core/problem.h"

namespace pagedattn::cuda {

// p holds device pointers (p.qo_indptr included); max_q: the most queries of one sequence,
// from the host copy of qo_indptr. Throws kUnsupported for problems the kernel does not cover.
void prefill(const detail::AttentionProblem& p, std::int64_t max_q, void* stream);

}  // namespace pagedattn::cuda
