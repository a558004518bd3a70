// Runs collectives in order on a thread of their own, so reduction of one
// gradient bucket overlaps with the caller computing the next (overlap_comm).
// Without overlap every task runs inline, on the caller's thread.
#ifndef ZERO_CORE_COMM_COMM_STREAM_H_
#define ZERO_CORE_COMM_COMM_STREAM_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"

namespace zero {

class CommStream {
 public:
  // A submitted task; Wait() on it returns the task's status.
  struct Work {
    bool done = false;
    absl::Status status;
  };
  using Handle = std::shared_ptr<Work>;

  explicit CommStream(bool asynchronous);
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  Handle Submit(std::function<absl::Status()> task);
  absl::Status Wait(const Handle& h);
  // Waits for every submitted task; returns the first failure.
  absl::Status Drain();
  bool asynchronous() const { return asynchronous_; }

 private:
  void Loop();

  const bool asynchronous_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Handle, std::function<absl::Status()>>> queue_;
  std::deque<Handle> pending_;  // submitted, not yet waited by Drain
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace zero

#endif  // ZERO_CORE_COMM_COMM_STREAM_H_
