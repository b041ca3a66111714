// pagedattn — what the attention ops compute, beyond plain softmax(q k^T) v.
#pragma once

#include "pagedattn/tensor.h"

namespace pagedattn {

// Positions: a sequence's keys are at positions [0, kv_len); its n queries are the last n
// positions, [kv_len - n, kv_len). For one query at position i and a key at position j:
//   logit = (q . k) * scale
//   if logits_soft_cap > 0:  logit = cap * tanh(logit / cap)
//   if alibi_slopes given:   logit += slope[head] * (j - i)
//   masked (weight 0) when causal and j > i, or when window_left >= 0 and j < i - window_left.
// With sinks, the softmax denominator gains exp(sink[head]) with no value vector behind it
// (so outputs can sum to less than one); the returned LSE includes that term.
struct AttentionParams {
  float scale = 0.0f;            // 0 means 1 / sqrt(head_dim)
  bool causal = true;            // prefill only: a decode query is its sequence's last position
  int window_left = -1;          // -1: no sliding window
  float logits_soft_cap = 0.0f;  // 0: no soft-cap
  TensorView alibi_slopes;       // optional f32 [num_q_heads]
  TensorView sinks;              // optional f32 [num_q_heads], natural-log logits
};

}  // namespace pagedattn
