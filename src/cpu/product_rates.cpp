// How fast this core issues VDPBF16PS against f32 FMAs, measured once per process, and the
// decode's choice between them (see cpu_features.h).
#include <algorithm>
#include <chrono>

#include "core/env_switch.h"
#include "cpu/bf16_dot.h"
#include "cpu/cpu_features.h"

namespace pagedattn::cpu {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kChains = 16;      // independent accumulators: issue rate, not latency
constexpr int kIterations = 2048;  // 32 K instructions a trial: tens of microseconds
constexpr int kTrials = 3;

double per_ns(Clock::time_point t0) {
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  return kIterations * kChains / std::max(ns, 1.0);
}

// The best of kTrials timings of kIterations x kChains instructions (kBf16Dot: VDPBF16PS, else
// FMA), one chain per register. The asm statements give each iteration a "new" operand, so
// nothing is hoisted, and keep the chains.
template <bool kBf16Dot>
PAGEDATTN_BF16_TARGET double issue_rate() {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(static_cast<float>(i));
  __m512i x = _mm512_set1_epi16(0x3f80), y = _mm512_set1_epi16(0x3c00);  // bf16 1 and 2^-7
  __m512 m = _mm512_set1_ps(0.5f), c = _mm512_set1_ps(1.0f);
  double best = 0.0;
  for (int t = 0; t < kTrials; ++t) {
    const auto t0 = Clock::now();
    for (int n = 0; n < kIterations; ++n) {
      for (int i = 0; i < kChains; ++i) a[i] = kBf16Dot ? bf16::dot_pairs(a[i], x, y) : _mm512_fmadd_ps(a[i], m, c);
      asm volatile("" : "+v"(x), "+v"(m));
    }
    best = std::max(best, per_ns(t0));
  }
  for (int i = 0; i < kChains; ++i) asm volatile("" : : "v"(a[i]));
  return best;
}

ProductRates measure() {
  ProductRates r;
  r.bf16_dot_per_ns = issue_rate<true>();
  r.fma_per_ns = issue_rate<false>();
  return r;
}

}  // namespace

ProductRates bf16_product_rates() {
  static const ProductRates rates = bf16_dot_supported() ? measure() : ProductRates{};
  return rates;
}

bool decode_bf16_on_fmas() {
  static const bool on = [] {
    const ProductRates r = bf16_product_rates();
    const bool measured = r.bf16_dot_per_ns > 0.0 && r.fma_per_ns >= kFmaOverBf16Dots * r.bf16_dot_per_ns;
    return detail::env_switch("PAGEDATTN_CPU_DECODE_FMA", measured);
  }();
  return on;
}

bool prefill_bf16_on_fmas() {
  static const bool on = [] {
    const ProductRates r = bf16_product_rates();
    const bool measured = r.bf16_dot_per_ns > 0.0 && r.fma_per_ns >= kPrefillFmaOverBf16Dots * r.bf16_dot_per_ns;
    return detail::env_switch("PAGEDATTN_CPU_PREFILL_FMA", measured);
  }();
  return on;
}

bool decode_bf16_amx_logits() {
  static const bool on = amx_tiles_enabled() && !detail::env_switched_off("PAGEDATTN_CPU_DECODE_AMX");
  return on;
}

}  // namespace pagedattn::cpu
