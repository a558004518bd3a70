// One direction of the host<->device link for ZeRO-Offload's pipelined
// update (HostStateStore): a thread that runs the copies handed to it in
// order, as a GPU's copy engine runs one direction's DMAs. Made once and
// reused every step: a thread per copy cost a thread start per piece.
#ifndef ZERO_CORE_ENGINE_COPY_LANE_H_
#define ZERO_CORE_ENGINE_COPY_LANE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace zero {

class CopyLane {
 public:
  CopyLane();
  ~CopyLane();
  CopyLane(const CopyLane&) = delete;
  CopyLane& operator=(const CopyLane&) = delete;

  // Queues `copy` behind the ones before; returns its ticket (1, 2, ...).
  int64_t Submit(std::function<void()> copy);
  // Returns once the copy of `ticket` and every one before it has run.
  void Wait(int64_t ticket);
  // Returns once everything submitted so far has run.
  void Drain();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::function<void()>> q_;
  int64_t submitted_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_COPY_LANE_H_
