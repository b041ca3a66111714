// Internal: whether the CPU kernels may use AMX tiles (defined in prefill_amx.cpp).
#pragma once

namespace pagedattn::cpu {

// True when the CPU has AMX-TILE and AMX-BF16 and the OS grants this process the tile state.
bool amx_bf16_supported();
// amx_bf16_supported(), unless the environment variable PAGEDATTN_CPU_AMX is "0".
bool amx_tiles_enabled();

}  // namespace pagedattn::cpu
