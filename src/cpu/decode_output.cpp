// Output side of the CPU decode kernel (see decode_output.h).
#include "cpu/decode_output.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/row_convert.h"
#include "pagedattn/dtype.h"

namespace pagedattn::cpu {

namespace {

// V scale of KV head kh (fp8 caches store V scaled; other dtypes do not).
float v_scale(const detail::AttentionProblem& p, std::int64_t kh) {
  return is_fp8(p.kv.dtype) ? p.kv.v_scale_of(kh) : 1.0f;
}

// out[s, h] = acc * v_scale / (l + sink term), lse = log of the denominator.
void write_head(const detail::AttentionProblem& p, std::int64_t s, std::int64_t h, float m,
                float l, const float* acc, float v_scale) {
  const auto& qo = p.qo;
  const float sink = p.variant.sinks ? p.variant.sinks[h] : detail::kNegInf;
  const float m_all = std::max(m, sink);
  float denom = 0.0f, alpha = 0.0f;
  if (m_all != detail::kNegInf) {
    alpha = m == detail::kNegInf ? 0.0f : std::exp(m - m_all);
    denom = l * alpha + (sink == detail::kNegInf ? 0.0f : std::exp(sink - m_all));
  }
  const float factor = denom > 0.0f ? alpha * v_scale / denom : 0.0f;
  const std::int64_t t = p.q_begin(s);
  std::byte* orow = qo.out + (t * qo.out_token_stride + h * qo.out_head_stride) *
                                 static_cast<std::int64_t>(dtype_size(qo.out_dtype));
  store_scaled_row(acc, p.head_dim, factor, qo.out_dtype, orow);
  if (qo.lse) {
    qo.lse[t * qo.lse_token_stride + h * qo.lse_head_stride] =
        denom > 0.0f ? m_all + std::log(denom) : detail::kNegInf;
  }
}

}  // namespace

void decode_write_output(const detail::AttentionProblem& p, const DecodeWorkItem& it,
                         const DecodeState& st) {
  const std::int64_t G = st.group, D = st.head_dim;
  for (std::int64_t hi = 0; hi < st.heads; ++hi) {
    const std::int64_t kh = it.kv_head + hi;
    for (std::int64_t g = 0; g < G; ++g) {
      write_head(p, it.seq, kh * G + g, st.m[hi * G + g], st.l[hi * G + g],
                 st.acc + (hi * G + g) * D, v_scale(p, kh));
    }
  }
}

void decode_write_partial(std::int64_t slot, const DecodeState& st, float* part) {
  const std::int64_t HG = st.heads * st.group, D = st.head_dim;
  float* dst = part + slot * HG * (D + 2);
  std::memcpy(dst, st.acc, static_cast<std::size_t>(HG * D) * sizeof(float));
  for (std::int64_t i = 0; i < HG; ++i) {
    dst[HG * D + 2 * i] = st.m[i];
    dst[HG * D + 2 * i + 1] = st.l[i];
  }
}

void decode_merge(const detail::AttentionProblem& p, const DecodeMerge& mg, std::int64_t heads,
                  const float* part, float* acc) {
  const std::int64_t G = p.group_size(), D = p.head_dim, HG = heads * G;
  for (std::int64_t i = 0; i < HG; ++i) {
    const std::int64_t kh = mg.kv_head + i / G;
    float m = detail::kNegInf;
    for (std::int64_t k = 0; k < mg.count; ++k) {
      m = std::max(m, part[(mg.first_slot + k) * HG * (D + 2) + HG * D + 2 * i]);
    }
    float l = 0.0f;
    std::fill_n(acc, D, 0.0f);
    if (m != detail::kNegInf) {
      for (std::int64_t k = 0; k < mg.count; ++k) {
        const float* st = part + (mg.first_slot + k) * HG * (D + 2);
        const float mk = st[HG * D + 2 * i];
        if (mk == detail::kNegInf) continue;
        const float w = std::exp(mk - m);
        l += st[HG * D + 2 * i + 1] * w;
        for (std::int64_t d = 0; d < D; ++d) acc[d] += w * st[i * D + d];
      }
    }
    write_head(p, mg.seq, kh * G + i % G, m, l, acc, v_scale(p, kh));
  }
}

}  // namespace pagedattn::cpu
