// Paged decode on the CPU (placeholder until the SIMD kernel lands: runs the reference).
#include "cpu/cpu_backend.h"

namespace pagedattn::cpu {
void decode(const detail::AttentionProblem& p, const DecodeOptions&, int) { reference_attention(p); }
}  // namespace pagedattn::cpu
