#include "compare.h"

#include <cmath>
#include <sstream>

namespace pagedattn::testing {

namespace {
enum class Kind { kFinite, kNaN, kPosInf, kNegInf };

Kind kind_of(double x) {
  if (std::isnan(x)) return Kind::kNaN;
  if (std::isinf(x)) return x > 0 ? Kind::kPosInf : Kind::kNegInf;
  return Kind::kFinite;
}

std::string format_value(double x) {
  std::ostringstream s;
  s.precision(9);
  s << x;
  return s.str();
}
}  // namespace

Tolerance tolerance_for(DType output_dtype) {
  switch (output_dtype) {
    case DType::kF32: return {1e-4, 1e-4};
    case DType::kF16: return {2e-3, 2e-3};
    default: return {1.6e-2, 1.6e-2};
  }
}

namespace {
// Shared by both comparisons; `abs_only` drops the relative term and the NMSE stage.
Comparison compare_impl(std::span<const double> got, std::span<const double> expected,
                        Tolerance tol, std::string_view what, bool abs_only) {
  Comparison c;
  if (got.size() != expected.size()) {
    c.passed = false;
    c.message = std::string(what) + ": got " + std::to_string(got.size()) +
                " elements, expected " + std::to_string(expected.size());
    return c;
  }
  double err2 = 0.0, ref2 = 0.0;
  std::string first_reason;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = expected[i];
    const Kind kg = kind_of(g), ke = kind_of(e);
    bool bad = false;
    if (kg != ke) {
      bad = true;  // stage 1: a NaN/Inf where none belongs, or a missing one
    } else if (ke == Kind::kFinite) {
      const double diff = std::fabs(g - e);
      c.max_abs_error = std::max(c.max_abs_error, diff);
      err2 += diff * diff;
      ref2 += e * e;
      bad = !(diff <= tol.atol + (abs_only ? 0.0 : tol.rtol * std::fabs(e)));
    }
    if (bad) {
      if (c.num_bad == 0) {
        c.first_bad = static_cast<std::int64_t>(i);
        first_reason = kg != ke ? " (NaN/Inf mismatch)" : "";
      }
      ++c.num_bad;
    }
  }
  // With an all-zero expectation the relative error is undefined; stage 2 already bounds it.
  c.nmse = ref2 > 0.0 ? err2 / ref2 : 0.0;
  if (c.num_bad > 0) {
    const auto i = static_cast<std::size_t>(c.first_bad);
    c.passed = false;
    c.message = std::string(what) + "[" + std::to_string(c.first_bad) + "]: got " +
                format_value(got[i]) + ", expected " + format_value(expected[i]) + first_reason +
                "; " + std::to_string(c.num_bad) + " of " + std::to_string(got.size()) +
                " elements outside atol " + format_value(tol.atol) +
                (abs_only ? "" : " + rtol " + format_value(tol.rtol)) + " (max abs error " +
                format_value(c.max_abs_error) + ")";
    return c;
  }
  const double nmse_limit = (tol.rtol / 4) * (tol.rtol / 4);
  if (!abs_only && c.nmse > nmse_limit) {
    c.passed = false;
    c.message = std::string(what) + ": NMSE " + format_value(c.nmse) + " exceeds " +
                format_value(nmse_limit) + " although every element is within tolerance" +
                " (max abs error " + format_value(c.max_abs_error) + ")";
  }
  return c;
}
}  // namespace

Comparison compare(std::span<const double> got, std::span<const double> expected, Tolerance tol,
                   std::string_view what) {
  return compare_impl(got, expected, tol, what, false);
}

Comparison compare_lse(std::span<const double> got, std::span<const double> expected,
                       std::string_view what) {
  return compare_impl(got, expected, {kLseTolerance, 0.0}, what, true);
}

std::vector<double> read_values(const TensorView& t) {
  std::vector<double> out;
  const std::int64_t n = t.numel();
  if (n <= 0) return out;
  out.reserve(static_cast<std::size_t>(n));
  const int rank = t.rank();
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t offset = 0;
    for (int d = 0; d < rank; ++d) offset += index[static_cast<std::size_t>(d)] * t.stride(d);
    out.push_back(static_cast<double>(load_as_float(t.data(), t.dtype(), offset)));
    for (int d = rank - 1; d >= 0; --d) {  // odometer increment, last dimension fastest
      if (++index[static_cast<std::size_t>(d)] < t.size(d)) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

}  // namespace pagedattn::testing
