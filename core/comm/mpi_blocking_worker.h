// The thread that runs an MPI communicator's blocking collectives, so the
// calling thread can wait for them with a deadline (docs/ARCHITECTURE.md,
// "Failures").
#ifndef ZERO_CORE_COMM_MPI_BLOCKING_WORKER_H_
#define ZERO_CORE_COMM_MPI_BLOCKING_WORKER_H_

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/comm/local_doorbell.h"

namespace zero {

// One blocking collective, described by value: posting it allocates
// nothing (a std::function holding the counts did, per call).
struct MpiJob {
  using Clock = std::chrono::steady_clock;
  enum Op { kAllGather, kAllGatherV, kAllReduce, kBcast, kBarrier, kReduceScatterBlock } op;
  const void* send = nullptr;
  void* recv = nullptr;
  int count = 0;  // per rank (all-gather, reduce-scatter) or in total
  MPI_Datatype type = MPI_BYTE;
  MPI_Op mop = MPI_OP_NULL;
  int root = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  // Whether to wait in the arrival gate first, and until when, and the
  // communicator's local doorbell for the gate's sleeps (or null).
  bool gate = false;
  LocalDoorbell* doorbell = nullptr;
  Clock::time_point deadline = Clock::time_point::max();
};

// Runs blocking MPI collectives for one communicator on its own thread
// (docs/ARCHITECTURE.md, "Failures"): the all-reduce, whose tuned algorithm
// is faster than libnbc's non-blocking one and sums in the order every fp32
// result recorded so far has (all-gathers and broadcasts move bits only and
// run on the calling thread instead: MpiCommunicator::Polled); running them
// here lets the calling thread wait with a deadline
// and return a timeout when a peer is dead or stuck, while this thread stays
// inside MPI (it is detached then: the communicator is broken, and the job
// ends without MPI_Finalize). Shared with the communicator by a shared_ptr,
// so a stuck worker never outlives what it touches: the all-gather-v counts
// live here too (written only while no job runs).
class BlockingWorker : public std::enable_shared_from_this<BlockingWorker> {
 public:
  using Clock = MpiJob::Clock;

  // The thread starts with the first job handed to Run (never in direct
  // mode, where the caller runs every job, nor for a communicator whose
  // collectives all run on the caller).
  // `idle_spin`: whether the worker spins a little for the next job before
  // sleeping (not where threads outnumber cores: its yields keep it
  // runnable, and the scheduler then counts a core busy that the compute
  // threads need).
  static std::shared_ptr<BlockingWorker> Make(bool idle_spin) {
    return std::shared_ptr<BlockingWorker>(new BlockingWorker(idle_spin));
  }

  std::vector<int> counts, displs;

  // Runs `job` on the worker; waits until it returns or `deadline`
  // passes. false: timed out (the job still runs). `spin`: whether to spin
  // before sleeping (a small job).
  bool Run(const MpiJob& job, Clock::time_point deadline, bool spin, int* rc);

  void Stop();

  // Runs `j` on the calling thread (the worker's loop, or a direct call)
  // once every rank has arrived (mpi_arrival_gate.h: the blocking call
  // itself would busy-poll through the wait). A barrier is the gate alone.
  // kArrivalTimedOut: the peers did not arrive by the job's deadline.
  int ExecuteGated(const MpiJob& j);

  // The blocking MPI call `j` names, on the calling thread.
  int Execute(const MpiJob& j);

 private:
  explicit BlockingWorker(bool idle_spin) : idle_spin_(idle_spin) {}

  void Loop();

  std::mutex mu_;
  std::condition_variable cv_job_, cv_done_;
  MpiJob job_{MpiJob::kBarrier};
  std::atomic<uint64_t> posted_{0}, finished_{0};
  std::atomic<int> rc_{MPI_SUCCESS};
  bool stop_ = false, worker_sleeping_ = false, caller_sleeping_ = false;
  bool started_ = false;  // only the caller touches it
  const bool idle_spin_;
};

}  // namespace zero

#endif  // ZERO_CORE_COMM_MPI_BLOCKING_WORKER_H_
