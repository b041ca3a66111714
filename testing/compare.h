// The one comparator of the test suite (DESIGN.md §5.14). Every check of a computed result
// against an expected one goes through here, in three stages:
//   1. NaN / Inf positions: an element whose class (NaN, +Inf, -Inf, finite) differs from the
//      expected element's fails, whatever its magnitude;
//   2. per element: |got - expected| <= atol + rtol * |expected|, (atol, rtol) from the dtype
//      the result was stored in;
//   3. NMSE = sum (got - expected)^2 / sum expected^2 <= (rtol / 4)^2: rounding errors are
//      unbiased and mostly far below the per-element bound, so an error that sits near the
//      bound on every element is a bug, not rounding.
// On failure the message names the first bad index, got, expected and how many elements failed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pagedattn/dtype.h"
#include "pagedattn/tensor.h"

namespace pagedattn::testing {

struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};

// (1e-4, 1e-4) f32, (2e-3, 2e-3) f16, (1.6e-2, 1.6e-2) bf16 (and fp8, which is never an output).
Tolerance tolerance_for(DType output_dtype);

// Absolute tolerance of LSE values (f32, natural log).
constexpr double kLseTolerance = 1e-3;

struct Comparison {
  bool passed = true;
  std::int64_t num_bad = 0;       // elements failing stage 1 or 2
  std::int64_t first_bad = -1;    // index of the first of them
  double max_abs_error = 0.0;     // over elements whose classes match and are finite
  double nmse = 0.0;
  std::string message;            // empty when passed
};

// Compares element-wise; `what` prefixes the message ("out", "lse").
Comparison compare(std::span<const double> got, std::span<const double> expected, Tolerance tol,
                   std::string_view what);

// LSE: absolute tolerance only, and -inf (an empty attention) must be matched exactly.
Comparison compare_lse(std::span<const double> got, std::span<const double> expected,
                       std::string_view what = "lse");

// The elements of a strided view of any float dtype, in row-major logical order, as doubles.
std::vector<double> read_values(const TensorView& t);

}  // namespace pagedattn::testing
