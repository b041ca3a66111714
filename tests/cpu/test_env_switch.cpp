// The environment switches that force implementation paths (src/core/env_switch.h): a switch
// reads "0" / "1" and leaves anything else to the caller; an integer switch takes only whole
// integers in its range.
#include <cstdlib>

#include <gtest/gtest.h>

#include "core/env_switch.h"

namespace pagedattn::detail {
namespace {

constexpr const char* kName = "PAGEDATTN_TEST_ENV_SWITCH";

class EnvSwitch : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kName); }
  static void set(const char* value) { setenv(kName, value, 1); }
};

TEST_F(EnvSwitch, OnOffOrTheCallersChoice) {
  EXPECT_TRUE(env_switch(kName, true));
  EXPECT_FALSE(env_switch(kName, false));
  set("0");
  EXPECT_FALSE(env_switch(kName, true));
  EXPECT_TRUE(env_switched_off(kName));
  set("1");
  EXPECT_TRUE(env_switch(kName, false));
  EXPECT_FALSE(env_switched_off(kName));
  set("yes");
  EXPECT_FALSE(env_switch(kName, false));
  EXPECT_TRUE(env_switch(kName, true));
}

TEST_F(EnvSwitch, IntegerInRange) {
  EXPECT_FALSE(env_int(kName, 0, 32).has_value());  // unset
  set("0");
  EXPECT_EQ(env_int(kName, 0, 32), 0);
  set("32");
  EXPECT_EQ(env_int(kName, 0, 32), 32);
  set("7");
  EXPECT_EQ(env_int(kName, 0, 32), 7);
}

TEST_F(EnvSwitch, IntegerRejectsWhatIsNotAWholeIntegerInRange) {
  for (const char* bad : {"", "33", "-1", "3x", "x3", " 3", "3.5", "99999999999999999999"}) {
    set(bad);
    EXPECT_FALSE(env_int(kName, 0, 32).has_value()) << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace pagedattn::detail
