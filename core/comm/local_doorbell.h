// A doorbell per rank of one node: a futex word per local rank in a POSIX
// shared-memory segment. A rank that waits for its peers sleeps on its own
// word (FUTEX_WAIT with a timeout) and a peer that did something the
// waiter may need (posted a collective, made progress in one, finished
// one) rings it: increments the word and, if someone sleeps on it, wakes
// them. The waiter learns of its peer's progress from the ring instead of
// guessing with a timer (bench/README.md, "Waiting under load";
// docs/ARCHITECTURE.md, "Failures"). Linux only: the MPI backend's.
#ifndef ZERO_CORE_COMM_LOCAL_DOORBELL_H_
#define ZERO_CORE_COMM_LOCAL_DOORBELL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace zero {

class LocalDoorbell {
 public:
  // Creates the segment `name` ("/..." as shm_open wants; it must not
  // exist yet) with a word per each of `ranks` local ranks, mapped as rank
  // `self`. The creator unlinks the name once every rank has mapped it
  // (Unlink), so a crash leaves nothing behind after that.
  static absl::StatusOr<std::unique_ptr<LocalDoorbell>> Create(const std::string& name,
                                                               int ranks, int self);
  // Maps the segment another rank created.
  static absl::StatusOr<std::unique_ptr<LocalDoorbell>> Open(const std::string& name, int ranks,
                                                             int self);
  static absl::Status Unlink(const std::string& name);

  ~LocalDoorbell();
  LocalDoorbell(const LocalDoorbell&) = delete;
  LocalDoorbell& operator=(const LocalDoorbell&) = delete;

  int ranks() const { return ranks_; }
  int self() const { return self_; }

  // This rank's word, read before the test whose failure leads to Wait: a
  // ring between that test and the wait then ends the wait at once
  // instead of being lost.
  uint32_t Seen() const;

  // Rings local rank `rank`: its word moves (always) and a thread
  // sleeping on it wakes (a system call only when one sleeps).
  void Ring(int rank);
  // Rings every local rank but this one.
  void RingOthers();

  // Sleeps until this rank's word differs from `seen` (rung) or `timeout`
  // passes. true: rung (also when it was rung before the call).
  bool Wait(uint32_t seen, std::chrono::microseconds timeout);

  // Local rank `rank`'s word (for tests).
  uint32_t Count(int rank) const;

 private:
  struct alignas(64) Slot {
    std::atomic<uint32_t> word;
    std::atomic<uint32_t> sleepers;
  };
  static_assert(std::atomic<uint32_t>::is_always_lock_free, "a futex word");

  LocalDoorbell(Slot* slots, size_t bytes, int ranks, int self)
      : slots_(slots), bytes_(bytes), ranks_(ranks), self_(self) {}
  static absl::StatusOr<std::unique_ptr<LocalDoorbell>> Map(const std::string& name, int ranks,
                                                            int self, bool create);

  Slot* slots_;
  size_t bytes_;
  int ranks_, self_;
};

}  // namespace zero

#endif  // ZERO_CORE_COMM_LOCAL_DOORBELL_H_
