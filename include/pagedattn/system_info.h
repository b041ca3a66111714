// pagedattn — what this build and this machine offer (the CLI's `info`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagedattn {

struct GpuInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int num_sms = 0;
  std::int64_t memory_bytes = 0;
};

// GPUs the CUDA runtime sees; empty when CUDA is not built or no driver/GPU is present.
std::vector<GpuInfo> cuda_devices();
// Why cuda_devices() is empty, or "" when it is not.
std::string cuda_unavailable_reason();

// The SIMD target the CPU backend's runtime dispatch chose (e.g. "AVX3_DL"), and every
// target compiled in.
std::string cpu_simd_target();
std::vector<std::string> cpu_compiled_simd_targets();
// The bf16 products the CPU kernels use for bf16 q and KV, e.g. "prefill amx-bf16, decode
// amx-bf16 logits + f32 FMAs (VDPBF16PS 0.96/ns, FMA 2.98/ns)" (the decode takes VDPBF16PS or
// f32 FMAs, whichever this core issues faster per multiply-add, measured once per process), or
// "none" (f32 products throughout).
std::string cpu_bf16_products();
int cpu_hardware_threads();
// Bytes of the largest data cache one core of this CPU uses, as /sys reports it for cpu0 (else
// as the C library does; 32 MiB where neither says). On a virtual machine this is the host's
// cache, shared with other tenants.
std::int64_t cpu_last_level_cache_bytes();

}  // namespace pagedattn
