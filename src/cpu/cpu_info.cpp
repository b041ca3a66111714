// The CPU backend's view of the machine: thread count and the SIMD target that Highway's
// runtime dispatch picks (the same mechanism the kernels use, so the answer cannot drift).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/cpu_info.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace pagedattn::cpu::HWY_NAMESPACE {
const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }
}  // namespace pagedattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>
#include <unistd.h>

#include <cstdio>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_features.h"
#include "pagedattn/system_info.h"

namespace pagedattn {

namespace cpu {
HWY_EXPORT(TargetNameImpl);

const char* simd_target_name() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

std::int64_t last_level_cache_bytes() {
  static const std::int64_t bytes = [] {
    for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
      const long b = sysconf(name);
      if (b > 0) return static_cast<std::int64_t>(b);
    }
    return std::int64_t{32} << 20;
  }();
  return bytes;
}

int resolve_num_threads(int requested) {
  return requested > 0 ? requested : omp_get_max_threads();
}
}  // namespace cpu

std::string cpu_simd_target() { return cpu::simd_target_name(); }

std::vector<std::string> cpu_compiled_simd_targets() {
  std::vector<std::string> out;
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) out.emplace_back(hwy::TargetName(t));
  return out;
}

std::string cpu_bf16_products() {
  if (!cpu::bf16_dot_supported()) return "none";
  const cpu::ProductRates r = cpu::bf16_product_rates();
  char rates[96];
  std::snprintf(rates, sizeof(rates), "VDPBF16PS %.2f/ns, FMA %.2f/ns", r.bf16_dot_per_ns, r.fma_per_ns);
  const std::string prefill = cpu::amx_tiles_enabled() ? "amx-bf16" : "avx512-bf16";
  const std::string decode = !cpu::decode_bf16_on_fmas()    ? "avx512-bf16"
                             : cpu::decode_bf16_amx_logits() ? "amx-bf16 logits + f32 FMAs"
                                                             : "f32 FMAs";
  return "prefill " + prefill + ", decode " + decode + " (" + rates + ")";
}

int cpu_hardware_threads() { return omp_get_num_procs(); }

std::int64_t cpu_last_level_cache_bytes() { return cpu::last_level_cache_bytes(); }

}  // namespace pagedattn
#endif  // HWY_ONCE
