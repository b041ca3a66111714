// Internal: environment switches that force one implementation path over another, so that tests
// can cover every path on one machine and a measurement can compare them in one binary.
#pragma once

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace pagedattn::detail {

// The value of environment variable `name`; empty when it is unset.
inline std::string_view env_value(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string_view(value) : std::string_view();
}

// True when `name` is set to "0": the path it names is switched off.
inline bool env_switched_off(const char* name) { return env_value(name) == "0"; }

// false when `name` is "0", true when it is "1", else the caller's own choice.
inline bool env_switch(const char* name, bool otherwise) {
  const std::string_view v = env_value(name);
  return v == "0" ? false : v == "1" ? true : otherwise;
}

// The value of `name` when it is set to an integer in [lo, hi]; otherwise none (the caller's own
// choice stands).
inline std::optional<int> env_int(const char* name, int lo, int hi) {
  const std::string_view v = env_value(name);
  int n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n < lo || n > hi) return std::nullopt;
  return n;
}

}  // namespace pagedattn::detail
