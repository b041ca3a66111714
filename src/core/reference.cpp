#include "pagedattn/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace pagedattn::reference {

double attend(std::span<const double> q, std::span<const double> k, std::span<const double> v,
              std::int64_t kv_len, std::int64_t head_dim, std::int64_t query_pos, double scale,
              bool causal, int window_left, double soft_cap, double alibi_slope, double sink,
              std::span<double> out) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<double> logits(static_cast<std::size_t>(kv_len), kNegInf);
  double max_logit = sink;
  for (std::int64_t j = 0; j < kv_len; ++j) {
    if (causal && j > query_pos) continue;
    if (window_left >= 0 && j < query_pos - window_left) continue;
    double dot = 0.0;
    for (std::int64_t d = 0; d < head_dim; ++d) {
      dot += q[static_cast<std::size_t>(d)] * k[static_cast<std::size_t>(j * head_dim + d)];
    }
    double logit = dot * scale;
    if (soft_cap > 0.0) logit = soft_cap * std::tanh(logit / soft_cap);
    logit += alibi_slope * static_cast<double>(j - query_pos);
    logits[static_cast<std::size_t>(j)] = logit;
    max_logit = std::max(max_logit, logit);
  }
  std::fill(out.begin(), out.end(), 0.0);
  if (max_logit == kNegInf) return kNegInf;  // nothing attended and no sink
  double denom = std::exp(sink - max_logit);
  for (std::int64_t j = 0; j < kv_len; ++j) {
    const double logit = logits[static_cast<std::size_t>(j)];
    if (logit == kNegInf) continue;
    const double p = std::exp(logit - max_logit);
    denom += p;
    for (std::int64_t d = 0; d < head_dim; ++d) {
      out[static_cast<std::size_t>(d)] += p * v[static_cast<std::size_t>(j * head_dim + d)];
    }
  }
  for (double& o : out) o /= denom;
  return max_logit + std::log(denom);
}

void merge(std::span<double> v_a, double& lse_a, std::span<const double> v_b, double lse_b) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  if (lse_b == kNegInf) return;
  if (lse_a == kNegInf) {
    std::copy(v_b.begin(), v_b.end(), v_a.begin());
    lse_a = lse_b;
    return;
  }
  const double m = std::max(lse_a, lse_b);
  const double wa = std::exp(lse_a - m), wb = std::exp(lse_b - m);
  for (std::size_t d = 0; d < v_a.size(); ++d) v_a[d] = (wa * v_a[d] + wb * v_b[d]) / (wa + wb);
  lse_a = m + std::log(wa + wb);
}

}  // namespace pagedattn::reference
