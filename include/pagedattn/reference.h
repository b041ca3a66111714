// pagedattn — the oracle: plain attention in double precision over dense (un-paged) K/V.
//
// Every backend, layout, dtype and variant is tested against this. It implements exactly the
// semantics documented in attention_params.h, in the most direct way.
#pragma once

#include <cstdint>
#include <span>

#include "pagedattn/attention_params.h"

namespace pagedattn::reference {

// One sequence, one query head against its KV head.
//   q [head_dim]; k, v [kv_len, head_dim] (row-major, already dequantised);
//   query_pos: the query's position; key j is at position j.
//   alibi_slope / sink: pass 0 / -infinity for none.
// Writes out[head_dim] and returns the LSE (natural log, -inf when nothing is attended).
double attend(std::span<const double> q, std::span<const double> k, std::span<const double> v,
              std::int64_t kv_len, std::int64_t head_dim, std::int64_t query_pos, double scale,
              bool causal, int window_left, double soft_cap, double alibi_slope, double sink,
              std::span<double> out);

// Merge of two attention states, in place into (v_a, lse_a).
void merge(std::span<double> v_a, double& lse_a, std::span<const double> v_b, double lse_b);

}  // namespace pagedattn::reference
