#include "cpu/merge_states.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/row_convert.h"

namespace pagedattn::cpu {

void merge_states(std::span<const StateView> inputs, const StateView& out, const float* sinks,
                  std::int64_t num_rows, std::int64_t num_heads, std::int64_t head_dim,
                  int num_threads) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const auto num_states = static_cast<std::int64_t>(inputs.size());
#pragma omp parallel num_threads(resolve_num_threads(num_threads)) if (num_rows * num_heads > 64)
  {
    std::vector<float> acc(static_cast<std::size_t>(head_dim));
    std::vector<float> weight(static_cast<std::size_t>(num_states));
#pragma omp for schedule(static)
    for (std::int64_t rh = 0; rh < num_rows * num_heads; ++rh) {
      const std::int64_t r = rh / num_heads, h = rh % num_heads;
      float m = sinks ? sinks[h] : kNegInf;
      for (std::int64_t i = 0; i < num_states; ++i) {
        const StateView& s = inputs[static_cast<std::size_t>(i)];
        m = std::max(m, s.lse[r * s.lse_row_stride + h * s.lse_head_stride]);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      float denom = 0.0f;
      if (m != kNegInf) {
        denom = sinks ? std::exp(sinks[h] - m) : 0.0f;
        for (std::int64_t i = 0; i < num_states; ++i) {
          const StateView& s = inputs[static_cast<std::size_t>(i)];
          const float lse = s.lse[r * s.lse_row_stride + h * s.lse_head_stride];
          const float w = lse == kNegInf ? 0.0f : std::exp(lse - m);
          denom += w;
          if (w == 0.0f) continue;
          const std::byte* v = s.v + (r * s.v_row_stride + h * s.v_head_stride) *
                                         static_cast<std::int64_t>(dtype_size(s.dtype));
          add_scaled_row(v, s.dtype, head_dim, w, acc.data());
        }
      }
      const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
      std::byte* o = out.v + (r * out.v_row_stride + h * out.v_head_stride) *
                                 static_cast<std::int64_t>(dtype_size(out.dtype));
      store_scaled_row(acc.data(), head_dim, inv, out.dtype, o);
      if (out.lse) {
        out.lse[r * out.lse_row_stride + h * out.lse_head_stride] =
            denom > 0.0f ? m + std::log(denom) : kNegInf;
      }
    }
  }
}

}  // namespace pagedattn::cpu
