// A fuzz input as a file, for readers that open a path: a memfd per
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

// A file in memory (memfd), made once and rewritten for each input, so a
// target whose reader opens a path costs no file creation, no disk write and
// no directory entry per execution. Path() opens it again through
// /proc/self/fd (a fresh open file description, as a real file would give).
class MemFile {
 public:
  MemFile() : fd_(memfd_create("zero_fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Makes the contents exactly data[0, size); returns Path().
  std::string Set(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return Path();
  }
  std::string Path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// The path of a file whose contents are exactly data[0, size) (one MemFile
// per process).
inline std::string AsFile(const uint8_t* data, size_t size) {
  static MemFile* file = new MemFile();
  return file->Set(data, size);
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
