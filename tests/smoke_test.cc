#include <gtest/gtest.h>
#include "absl/status/statusor.h"
#include <nlohmann/json.hpp>
TEST(Smoke, Works) { absl::StatusOr<int> s = 3; EXPECT_EQ(*s, 3); EXPECT_EQ(nlohmann::json::parse("[1]")[0], 1); }
