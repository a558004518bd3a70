// A fuzz input as a file, for readers that open a path: one memfd per
// process, rewritten for each input, opened again through /proc/self/fd.
#ifndef ZERO_TESTS_FUZZ_FUZZ_FILE_H_
#define ZERO_TESTS_FUZZ_FUZZ_FILE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace zero {
namespace fuzz {

// The path of a file whose contents are exactly data[0, size).
inline std::string AsFile(const uint8_t* data, size_t size) {
  static int fd = -1;
  if (fd < 0) {
    fd = memfd_create("zero_fuzz", MFD_CLOEXEC);
    if (fd < 0) {
      std::perror("memfd_create");
      std::abort();
    }
  }
  if (ftruncate(fd, 0) != 0) std::abort();
  size_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

// Stops the fuzzer with a message: a property the reader promised failed.
#define FUZZ_CHECK(cond)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                   \
      std::abort();                                                          \
    }                                                                        \
  } while (0)

}  // namespace fuzz
}  // namespace zero

#endif  // ZERO_TESTS_FUZZ_FUZZ_FILE_H_
