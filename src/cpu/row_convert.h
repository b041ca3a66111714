// Internal: a row of n elements between a storage dtype and f32, times a scale, with the dtype
// switch outside the element loop (load_as_float / store_from_float switch per element: ~25
// instructions each, as much as the attention of ~100 keys per head on a short decode). Loads
// and stores of every float dtype run on SIMD vectors of the dispatched target (row_convert.cpp),
// stores rounding bit for bit as store_from_float (nearest even; fp8 saturating, NaN kept).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedattn/dtype.h"

namespace pagedattn::cpu {

// out[i] = row[i] * scale for i < n, row holding n elements of dtype t.
void load_scaled_row(const std::byte* row, DType t, std::int64_t n, float scale, float* out);

// row[i] = x[i] * scale for i < n, rounded to dtype t.
void store_scaled_row(const float* x, std::int64_t n, float scale, DType t, std::byte* row);

// acc[i] += row[i] * scale for i < n, row holding n elements of dtype t (a fused multiply-add
// where the target has one).
void add_scaled_row(const std::byte* row, DType t, std::int64_t n, float scale, float* acc);

}  // namespace pagedattn::cpu
