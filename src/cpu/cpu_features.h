// Internal: which of the CPU kernels' instruction sets this machine lets them use.
#pragma once

#include <cstdint>

namespace pagedattn::cpu {

// True when the CPU runs AVX512F/BW/VL and AVX512-BF16 (defined in prefill_bf16.cpp).
bool bf16_dot_supported();

// True when the CPU has AMX-TILE and AMX-BF16 and the OS grants this process the tile state
// (defined in prefill_amx.cpp).
bool amx_bf16_supported();
// amx_bf16_supported(), unless the environment variable PAGEDATTN_CPU_AMX is "0".
bool amx_tiles_enabled();
// Releases this thread's tile configuration (loaded by amx_tiles_begin or
// amx_decode_tiles_begin); defined in prefill_amx.cpp.
void amx_tiles_end();

// Instructions per nanosecond that one core issues of 512-bit VDPBF16PS and of 512-bit f32
// FMAs, each over 16 independent accumulators, measured once per process (zeros without
// AVX512-BF16); defined in product_rates.cpp.
struct ProductRates {
  double fma_per_ns = 0.0, bf16_dot_per_ns = 0.0;
};
ProductRates bf16_product_rates();

// The bf16 decode's token-major units take f32 FMAs on converted rows instead of VDPBF16PS
// where FMAs issue at least this many times as fast: an FMA does half a VDPBF16PS's
// multiply-adds, and the conversions add a quarter more (docs/perf-notes.md: 3-4.6x on the
// Intel Xeon VMs measured, where the FMA path was 7-11% faster end to end).
inline constexpr double kFmaOverBf16Dots = 2.5;
// That choice, unless PAGEDATTN_CPU_DECODE_FMA is "0" or "1".
bool decode_bf16_on_fmas();
// The bf16 prefill's tiles take f32 FMAs on converted rows instead of VDPBF16PS where FMAs
// issue at least this many times as fast (and there are no AMX tiles): a tile converts each K/V
// row once for up to 256 query rows, so break-even is the 2x of multiply-adds per instruction.
inline constexpr double kPrefillFmaOverBf16Dots = 2.0;
// That choice, unless PAGEDATTN_CPU_PREFILL_FMA is "0" or "1".
bool prefill_bf16_on_fmas();
// Whether those FMA units take their logits on AMX tiles: amx_tiles_enabled(), unless
// PAGEDATTN_CPU_DECODE_AMX is "0".
bool decode_bf16_amx_logits();

// Bytes of the last-level data cache one core uses (cpu_last_level_cache_bytes); defined in
// cpu_info.cpp.
std::int64_t last_level_cache_bytes();

}  // namespace pagedattn::cpu
