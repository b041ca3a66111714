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

// Bytes of the last-level data cache as the C library reports it (32 MiB where it reports
// nothing); defined in cpu_info.cpp.
std::int64_t last_level_cache_bytes();

}  // namespace pagedattn::cpu
