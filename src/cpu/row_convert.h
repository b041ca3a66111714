// Internal: a row of n elements between a storage dtype and f32, times a scale, with the dtype
// switch outside the element loop (load_as_float / store_from_float switch per element: ~25
// instructions each, as much as the attention of ~100 keys per head on a short decode). Loads
// of every float dtype and stores of f32 and bf16 (round to nearest even, NaN kept quiet) run on
// SIMD vectors of the dispatched target (row_convert.cpp); the other stores element by element.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedattn/dtype.h"

namespace pagedattn::cpu {

// out[i] = row[i] * scale for i < n, row holding n elements of dtype t.
void load_scaled_row(const std::byte* row, DType t, std::int64_t n, float scale, float* out);

// row[i] = x[i] * scale for i < n, rounded to dtype t.
void store_scaled_row(const float* x, std::int64_t n, float scale, DType t, std::byte* row);

}  // namespace pagedattn::cpu
