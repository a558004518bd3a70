// A new, empty directory for one test's files (NVMe state, checkpoints).
#ifndef ZERO_TESTS_TESTING_FRESH_DIR_H_
#define ZERO_TESTS_TESTING_FRESH_DIR_H_

#include <string>

namespace zero {
namespace testing {

// TEST_TMPDIR (else /tmp) / `name` and a number: the first such directory
// that did not exist yet, created (0700). Aborts the test binary if none
// can be made, since every caller writes into it.
std::string FreshDir(const std::string& name);

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_FRESH_DIR_H_
