// The process-wide watchdog of direct mode (ZERO_MPI_WATCHDOG=1,
// docs/ARCHITECTURE.md "Failures"): the calling thread makes the blocking
// MPI call itself, which costs what raw MPI costs (handing each call to the
// worker costs 3-4 us, most of a 64K element all-gather on shared memory).
// A call stuck in MPI cannot be made to return, so the deadline is enforced
// by this process-wide thread, as PyTorch's NCCL watchdog does: past it,
// the rank prints the timeout (rank, collective, seconds) and ends the job.
// Each communicator in direct mode holds a slot; a call arms it with its
// deadline and disarms it when MPI returns: two clock reads and two stores
// per call.
#ifndef ZERO_CORE_COMM_MPI_WATCHDOG_H_
#define ZERO_CORE_COMM_MPI_WATCHDOG_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace zero {

struct WatchSlot {
  std::atomic<int64_t> deadline_ns{0};  // 0: no call in MPI
  std::atomic<const char*> what{""};
  int rank = 0, world = 1;
  std::atomic<double> timeout_s{0};
};

class Watchdog {
 public:
  static Watchdog& Get();

  // Watches `slot` while anyone holds it; starts the thread with the first.
  void Add(const std::shared_ptr<WatchSlot>& slot);

  // Nanoseconds on the clock slots' deadlines are given in.
  static int64_t NowNs();

 private:
  void Loop();
  [[noreturn]] static void Fire(const WatchSlot& s);

  std::mutex mu_;
  std::vector<std::weak_ptr<WatchSlot>> slots_;
  bool started_ = false;
};

}  // namespace zero

#endif  // ZERO_CORE_COMM_MPI_WATCHDOG_H_
