// Test-name helper shared by the CUDA test tables: GoogleTest parameter names may hold only
// letters, digits and underscores.
#pragma once

#include <cctype>
#include <string>

namespace pagedattn::test {

inline std::string gtest_name(std::string s) {
  for (char& ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

}  // namespace pagedattn::test
