// The developer switches' environment parsing (src/cuda/common/environment.hpp): a known name
// picks its choice; unset, empty or unknown values keep the fallback; flags take "0" and "1".
#include <gtest/gtest.h>

#include <cstdlib>

#include "cuda/common/environment.hpp"

namespace seqmix::test {
namespace {

enum class Walk { rows, quads, pairs };

constexpr const char* kVariable = "SEQMIX_TEST_ENVIRONMENT_SWITCH";

Walk walk_from_environment() {
  return cuda::choice_from_environment(kVariable, {{"rows", Walk::rows}, {"quads", Walk::quads}}, Walk::pairs);
}

TEST(Environment, ChoiceByName) {
  setenv(kVariable, "rows", 1);
  EXPECT_EQ(walk_from_environment(), Walk::rows);
  setenv(kVariable, "quads", 1);
  EXPECT_EQ(walk_from_environment(), Walk::quads);
  unsetenv(kVariable);
}

TEST(Environment, ChoiceFallsBackWhenUnsetEmptyOrUnknown) {
  unsetenv(kVariable);
  EXPECT_EQ(walk_from_environment(), Walk::pairs);
  setenv(kVariable, "", 1);
  EXPECT_EQ(walk_from_environment(), Walk::pairs);
  setenv(kVariable, "row", 1);  // a prefix is not a name
  EXPECT_EQ(walk_from_environment(), Walk::pairs);
  setenv(kVariable, "rowsx", 1);
  EXPECT_EQ(walk_from_environment(), Walk::pairs);
  unsetenv(kVariable);
}

TEST(Environment, Flag) {
  unsetenv(kVariable);
  EXPECT_TRUE(cuda::flag_from_environment(kVariable, true));
  EXPECT_FALSE(cuda::flag_from_environment(kVariable, false));
  setenv(kVariable, "0", 1);
  EXPECT_FALSE(cuda::flag_from_environment(kVariable, true));
  setenv(kVariable, "1", 1);
  EXPECT_TRUE(cuda::flag_from_environment(kVariable, false));
  setenv(kVariable, "yes", 1);
  EXPECT_FALSE(cuda::flag_from_environment(kVariable, false));
  EXPECT_TRUE(cuda::flag_from_environment(kVariable, true));
  unsetenv(kVariable);
}

}  // namespace
}  // namespace seqmix::test
