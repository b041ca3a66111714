// The bad-input check that the CPU unit tests share.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "pagedattn/error.h"

namespace pagedattn::testing {

// `f` must throw the library's Error with code kInvalidArgument and a message containing
// `needle`.
template <class F>
void expect_invalid_argument(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace pagedattn::testing
