#include "tests/testing/fresh_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace zero {
namespace testing {

std::string FreshDir(const std::string& name) {
  static std::mutex mu;
  static int n = 0;
  const char* base = std::getenv("TEST_TMPDIR");
  std::lock_guard<std::mutex> l(mu);
  // A directory left by an earlier run of the binary (outside Bazel, under
  // /tmp) is skipped, not reused: its files would not be this test's.
  for (;;) {
    const std::string dir = std::string(base ? base : "/tmp") + "/" + name + std::to_string(n++);
    if (::mkdir(dir.c_str(), 0700) == 0) return dir;
    if (errno != EEXIST) {
      std::fprintf(stderr, "FreshDir: cannot create '%s': %s\n", dir.c_str(), std::strerror(errno));
      std::abort();
    }
  }
}

}  // namespace testing
}  // namespace zero
