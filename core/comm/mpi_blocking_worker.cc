#include "core/comm/mpi_blocking_worker.h"

#include <pthread.h>

#include <thread>

#include "core/comm/mpi_arrival_gate.h"
#include "core/comm/mpi_init_policy.h"

namespace zero {

bool BlockingWorker::Run(const MpiJob& job, Clock::time_point deadline, bool spin, int* rc) {
  if (!started_) {
    started_ = true;
    std::thread([w = shared_from_this()] { w->Loop(); }).detach();
  }
  const uint64_t seq = posted_.load(std::memory_order_relaxed) + 1;
  {
    std::lock_guard<std::mutex> l(mu_);
    job_ = job;
    posted_.store(seq, std::memory_order_release);
    if (worker_sleeping_) cv_job_.notify_one();
  }
  // Most small collectives end within tens of microseconds: spin on the
  // flag (yielding the core) before sleeping on the condition variable.
  // A large one takes longer than the spin, which would only take the
  // core from the threads it waits for (bench/README.md, "Stage 3's
  // runtime threads": a fifth of the comm stream's CPU at stage 3).
  const auto spin_until = Clock::now() + std::chrono::microseconds(200);
  for (unsigned i = 0; spin; ++i) {
    if (finished_.load(std::memory_order_acquire) >= seq) {
      *rc = rc_.load(std::memory_order_relaxed);
      return true;
    }
    if ((i & 15) == 15 && Clock::now() > spin_until) break;
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> l(mu_);
  caller_sleeping_ = true;
  const bool done = cv_done_.wait_until(
      l, deadline, [&] { return finished_.load(std::memory_order_acquire) >= seq; });
  caller_sleeping_ = false;
  if (done) *rc = rc_.load(std::memory_order_relaxed);
  return done;
}

void BlockingWorker::Stop() {
  std::lock_guard<std::mutex> l(mu_);
  stop_ = true;
  cv_job_.notify_one();
}

int BlockingWorker::ExecuteGated(const MpiJob& j) {
  if (j.gate) {
    ArrivalGateOptions options;
    options.doorbell = j.doorbell;
    const int rc = WaitForArrival(j.comm, j.deadline, MpiSerialMutex(), options);
    if (rc != MPI_SUCCESS || j.op == MpiJob::kBarrier) return rc;
  }
  if (std::mutex* serial = MpiSerialMutex()) {
    std::lock_guard<std::mutex> l(*serial);
    return Execute(j);
  }
  return Execute(j);
}

int BlockingWorker::Execute(const MpiJob& j) {
  switch (j.op) {
    case MpiJob::kAllGather:
      return MPI_Allgather(j.send, j.count, j.type, j.recv, j.count, j.type, j.comm);
    case MpiJob::kAllGatherV:
      return MPI_Allgatherv(j.send, j.count, j.type, j.recv, counts.data(), displs.data(),
                            j.type, j.comm);
    case MpiJob::kAllReduce:
      return MPI_Allreduce(MPI_IN_PLACE, j.recv, j.count, j.type, j.mop, j.comm);
    case MpiJob::kBcast:
      return MPI_Bcast(j.recv, j.count, j.type, j.root, j.comm);
    case MpiJob::kBarrier:
      return MPI_Barrier(j.comm);
    case MpiJob::kReduceScatterBlock:
      return MPI_Reduce_scatter_block(j.send, j.recv, j.count, j.type, j.mop, j.comm);
  }
  return MPI_ERR_OTHER;
}

void BlockingWorker::Loop() {
  pthread_setname_np(pthread_self(), "zero-mpi");
  uint64_t seq = 0;
  for (;;) {
    // A burst of collectives follows one another closely: spin a little
    // for the next one before sleeping (the job is read without the lock
    // then: posted_'s release store orders it).
    const auto spin_until = Clock::now() + std::chrono::microseconds(100);
    for (unsigned i = 0; idle_spin_ && posted_.load(std::memory_order_acquire) <= seq; ++i) {
      if ((i & 15) == 15 && Clock::now() > spin_until) break;
      std::this_thread::yield();
    }
    MpiJob job;
    {
      std::unique_lock<std::mutex> l(mu_);
      if (posted_.load(std::memory_order_acquire) <= seq && !stop_) {
        worker_sleeping_ = true;
        cv_job_.wait(l, [&] { return stop_ || posted_.load(std::memory_order_acquire) > seq; });
        worker_sleeping_ = false;
      }
      if (stop_) return;
      job = job_;
      ++seq;
    }
    const int rc = ExecuteGated(job);
    rc_.store(rc, std::memory_order_relaxed);
    finished_.store(seq, std::memory_order_release);
    // The caller sets caller_sleeping_ under mu_ and then re-checks
    // finished_ before sleeping: taking mu_ here closes that window.
    // The notify comes after the unlock, so the woken caller does not
    // block on mu_ straight away (bench/README.md, "Collectives on the
    // calling thread": the 4-rank all-reduce's hand-off).
    bool wake = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      wake = caller_sleeping_;
    }
    if (wake) cv_done_.notify_one();
  }
}

}  // namespace zero
