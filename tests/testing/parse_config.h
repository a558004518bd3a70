// A ds_config text parsed where the test expects it to parse, or its error
// where it expects one (config_test, config_errors_test).
#ifndef ZERO_TESTS_TESTING_PARSE_CONFIG_H_
#define ZERO_TESTS_TESTING_PARSE_CONFIG_H_

#include <gtest/gtest.h>

#include <string>

#include "core/config/config.h"

namespace zero {
namespace testing {

// The parsed config; a failed parse fails the test (and gives defaults).
inline Config Parse(const std::string& text) {
  auto c = ParseDsConfig(text);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Config{};
}

// The parse error's message; a parse that succeeds fails the test.
inline std::string Error(const std::string& text) {
  auto c = ParseDsConfig(text);
  EXPECT_FALSE(c.ok()) << text;
  return c.ok() ? "" : std::string(c.status().message());
}

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_PARSE_CONFIG_H_
