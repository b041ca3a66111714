// The reference backend: gathers each sequence's K/V from its pages into dense double arrays,
// then runs the plain double-precision attention of reference.h for every query and head.
#include <vector>

#include "cpu/cpu_backend.h"
#include "pagedattn/reference.h"

namespace pagedattn::cpu {

namespace {
using detail::AttentionProblem;

void gather(const detail::KVCacheAccess& kv, const detail::KVTensorAccess& t, float scale,
            const detail::SeqPages& pages, std::int64_t head, std::vector<double>& dense) {
  const std::int64_t d_count = kv.head_dim;
  dense.assign(static_cast<std::size_t>(pages.kv_len * d_count), 0.0);
  for (std::int64_t j = 0; j < pages.kv_len; ++j) {
    const std::int64_t page = pages.page(j / kv.page_size);
    for (std::int64_t d = 0; d < d_count; ++d) {
      const std::int64_t off = t.offset(page, head, j % kv.page_size, d);
      dense[static_cast<std::size_t>(j * d_count + d)] =
          static_cast<double>(load_as_float(t.data, kv.dtype, off)) * scale;
    }
  }
}
}  // namespace

void reference_attention(const AttentionProblem& p) {
  const auto& kv = p.kv;
  const auto& qo = p.qo;
  const auto& var = p.variant;
  const std::int64_t D = p.head_dim;
  std::vector<double> k, v, q(static_cast<std::size_t>(D)), out(static_cast<std::size_t>(D));
  for (std::int64_t s = 0; s < p.num_seqs; ++s) {
    const detail::SeqPages pages = p.pages_of(s);
    const std::int64_t q0 = p.q_begin(s), n_q = p.q_end(s) - q0;
    const std::int64_t key_offset = p.key_offset(s), query_end = p.query_end(s);
    for (std::int64_t kh = 0; kh < p.num_kv_heads; ++kh) {
      gather(kv, kv.k, is_fp8(kv.dtype) ? kv.k_scale_of(kh) : 1.0f, pages, kh, k);
      gather(kv, kv.v, is_fp8(kv.dtype) ? kv.v_scale_of(kh) : 1.0f, pages, kh, v);
      for (std::int64_t g = 0; g < p.group_size(); ++g) {
        const std::int64_t h = kh * p.group_size() + g;
        for (std::int64_t i = 0; i < n_q; ++i) {
          const std::int64_t t = q0 + i;
          const auto* qrow = qo.q + (t * qo.q_token_stride + h * qo.q_head_stride) *
                                        static_cast<std::int64_t>(dtype_size(qo.q_dtype));
          for (std::int64_t d = 0; d < D; ++d) {
            q[static_cast<std::size_t>(d)] = load_as_float(qrow, qo.q_dtype, d);
          }
          // Positions relative to this level's first key.
          const std::int64_t query_pos = query_end - n_q + i - key_offset;
          const double lse = reference::attend(
              q, k, v, pages.kv_len, D, query_pos, var.scale, var.causal, var.window_left,
              var.soft_cap, var.alibi_slopes ? var.alibi_slopes[h] : 0.0,
              var.sinks ? var.sinks[h] : -std::numeric_limits<double>::infinity(), out);
          auto* orow = qo.out + (t * qo.out_token_stride + h * qo.out_head_stride) *
                                    static_cast<std::int64_t>(dtype_size(qo.out_dtype));
          for (std::int64_t d = 0; d < D; ++d) {
            store_from_float(orow, qo.out_dtype, d, static_cast<float>(out[static_cast<std::size_t>(d)]));
          }
          if (qo.lse) qo.lse[t * qo.lse_token_stride + h * qo.lse_head_stride] = static_cast<float>(lse);
        }
      }
    }
  }
}

}  // namespace pagedattn::cpu
