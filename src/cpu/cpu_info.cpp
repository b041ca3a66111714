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

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_features.h"
#include "pagedattn/system_info.h"

namespace pagedattn {

namespace cpu {
HWY_EXPORT(TargetNameImpl);

const char* simd_target_name() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

namespace {
// The largest data or unified cache /sys reports for cpu0, in bytes (0 where it reports none).
// /sys gives the cache one core can use; glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) gives, on AMD
// CPUs of several core complexes, the sum over the socket (256 MiB on an EPYC whose cores each
// see a 32 MiB L3), which would take a call that streams from DRAM for one that fits.
std::int64_t sysfs_last_level_cache_bytes() {
  std::int64_t best = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream type_file(dir + "type"), size_file(dir + "size");
    std::string type, size;
    if (!(type_file >> type) || !(size_file >> size) || type == "Instruction") continue;
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), value);
    if (ec != std::errc{} || value <= 0) continue;
    const std::string_view unit(end, static_cast<std::size_t>(size.data() + size.size() - end));
    const int shift = unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : 0;
    best = std::max(best, value << shift);
  }
  return best;
}
}  // namespace

std::int64_t last_level_cache_bytes() {
  static const std::int64_t bytes = [] {
    if (const std::int64_t b = sysfs_last_level_cache_bytes(); b > 0) return b;
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
  const std::string prefill = cpu::amx_tiles_enabled()      ? "amx-bf16"
                              : cpu::prefill_bf16_on_fmas() ? "f32 FMAs"
                                                            : "avx512-bf16";
  const std::string decode = !cpu::decode_bf16_on_fmas()    ? "avx512-bf16"
                             : cpu::decode_bf16_amx_logits() ? "amx-bf16 logits + f32 FMAs"
                                                             : "f32 FMAs";
  return "prefill " + prefill + ", decode " + decode + " (" + rates + ")";
}

int cpu_hardware_threads() { return omp_get_num_procs(); }

std::int64_t cpu_last_level_cache_bytes() { return cpu::last_level_cache_bytes(); }

}  // namespace pagedattn
#endif  // HWY_ONCE
