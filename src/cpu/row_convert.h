// Internal: a row of n elements between a storage dtype and f32, times a scale, with the dtype
// switch outside the element loop (load_as_float / store_from_float switch per element: ~25
// instructions each, as much as the attention of ~100 keys per head on a short decode).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedattn/dtype.h"

namespace pagedattn::cpu {

// out[i] = row[i] * scale for i < n, row holding n elements of dtype t.
inline void load_scaled_row(const std::byte* row, DType t, std::int64_t n, float scale, float* out) {
  switch (t) {
    case DType::kF32: {
      const auto* r = reinterpret_cast<const float*>(row);
      for (std::int64_t i = 0; i < n; ++i) out[i] = r[i] * scale;
      break;
    }
    case DType::kBF16: {
      const auto* r = reinterpret_cast<const std::uint16_t*>(row);
      for (std::int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(r[i]) * scale;
      break;
    }
    case DType::kF16: {
      const auto* r = reinterpret_cast<const std::uint16_t*>(row);
      for (std::int64_t i = 0; i < n; ++i) out[i] = f16_to_float(r[i]) * scale;
      break;
    }
    default:
      for (std::int64_t i = 0; i < n; ++i) out[i] = load_as_float(row, t, i) * scale;
  }
}

// row[i] = x[i] * scale for i < n, rounded to dtype t.
inline void store_scaled_row(const float* x, std::int64_t n, float scale, DType t, std::byte* row) {
  switch (t) {
    case DType::kF32: {
      auto* r = reinterpret_cast<float*>(row);
      for (std::int64_t i = 0; i < n; ++i) r[i] = x[i] * scale;
      break;
    }
    case DType::kBF16: {
      auto* r = reinterpret_cast<std::uint16_t*>(row);
      for (std::int64_t i = 0; i < n; ++i) r[i] = float_to_bf16(x[i] * scale);
      break;
    }
    case DType::kF16: {
      auto* r = reinterpret_cast<std::uint16_t*>(row);
      for (std::int64_t i = 0; i < n; ++i) r[i] = float_to_f16(x[i] * scale);
      break;
    }
    default:
      for (std::int64_t i = 0; i < n; ++i) store_from_float(row, t, i, x[i] * scale);
  }
}

}  // namespace pagedattn::cpu
