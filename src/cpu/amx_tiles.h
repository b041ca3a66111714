// Internal: what the CPU kernels' AMX code shares (prefill_amx.cpp, decode_amx.cpp). Include it
// only from translation units whose callers checked amx_tiles_enabled() first.
#pragma once

#include <cstdint>

#define PAGEDATTN_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f")))

namespace pagedattn::cpu {

// LDTILECFG's 64-byte operand, palette 1: each tile's rows and bytes per row.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

}  // namespace pagedattn::cpu
