// Paged prefill on the CPU (placeholder until the SIMD kernel lands: runs the reference).
#include "cpu/cpu_backend.h"

namespace pagedattn::cpu {
void prefill(const detail::AttentionProblem& p, int) { reference_attention(p); }
}  // namespace pagedattn::cpu
