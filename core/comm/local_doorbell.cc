#include "core/comm/local_doorbell.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zero {
namespace {

long Futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, timeout, nullptr, 0);
}

absl::Status Errno(const char* call, const std::string& name) {
  return absl::UnavailableError(
      absl::StrCat("local doorbell: ", call, "(", name, "): ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalDoorbell>> LocalDoorbell::Map(const std::string& name,
                                                                  int ranks, int self,
                                                                  bool create) {
  if (ranks < 1 || self < 0 || self >= ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("local doorbell: rank ", self, " of ", ranks, " local ranks"));
  }
  const size_t bytes = sizeof(Slot) * static_cast<size_t>(ranks);
  const int fd = create ? shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600)
                        : shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Errno("shm_open", name);
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    absl::Status s = Errno("ftruncate", name);
    close(fd);
    shm_unlink(name.c_str());
    return s;
  }
  struct stat st {};
  if (!create && (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(bytes))) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "local doorbell: ", name, " is smaller than ", ranks, " ranks' words"));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the segment
  if (p == MAP_FAILED) {
    absl::Status s = Errno("mmap", name);
    if (create) shm_unlink(name.c_str());
    return s;
  }
  // A fresh segment is zero-filled: every word and sleeper count starts
  // at 0, which is what an atomic holding 0 is on Linux.
  return std::unique_ptr<LocalDoorbell>(
      new LocalDoorbell(static_cast<Slot*>(p), bytes, ranks, self));
}

absl::StatusOr<std::unique_ptr<LocalDoorbell>> LocalDoorbell::Create(const std::string& name,
                                                                     int ranks, int self) {
  return Map(name, ranks, self, /*create=*/true);
}

absl::StatusOr<std::unique_ptr<LocalDoorbell>> LocalDoorbell::Open(const std::string& name,
                                                                   int ranks, int self) {
  return Map(name, ranks, self, /*create=*/false);
}

absl::Status LocalDoorbell::Unlink(const std::string& name) {
  if (shm_unlink(name.c_str()) != 0) return Errno("shm_unlink", name);
  return absl::OkStatus();
}

LocalDoorbell::~LocalDoorbell() { munmap(slots_, bytes_); }

uint32_t LocalDoorbell::Seen() const {
  return slots_[self_].word.load(std::memory_order_seq_cst);
}

uint32_t LocalDoorbell::Count(int rank) const {
  return slots_[rank].word.load(std::memory_order_seq_cst);
}

void LocalDoorbell::Ring(int rank) {
  Slot& s = slots_[rank];
  // Sequentially consistent both sides: the waiter counts itself a
  // sleeper and then re-reads the word, the ringer moves the word and
  // then reads the sleepers, so one of the two sees the other.
  s.word.fetch_add(1, std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) != 0) Futex(&s.word, FUTEX_WAKE, INT32_MAX, nullptr);
}

void LocalDoorbell::RingOthers() {
  for (int r = 0; r < ranks_; ++r) {
    if (r != self_) Ring(r);
  }
}

bool LocalDoorbell::Wait(uint32_t seen, std::chrono::microseconds timeout) {
  Slot& s = slots_[self_];
  if (s.word.load(std::memory_order_seq_cst) != seen) return true;
  if (timeout.count() <= 0) return false;
  timespec ts{static_cast<time_t>(timeout.count() / 1000000),
              static_cast<long>(timeout.count() % 1000000) * 1000};
  s.sleepers.fetch_add(1, std::memory_order_seq_cst);
  // The kernel sleeps only while the word still holds `seen`; a ring that
  // came first makes it return EAGAIN at once. EINTR (a signal) and a
  // spurious wake return early too: the caller re-tests either way, and
  // the wait never lasts longer than `timeout`.
  Futex(&s.word, FUTEX_WAIT, seen, &ts);
  s.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  return s.word.load(std::memory_order_seq_cst) != seen;
}

}  // namespace zero
