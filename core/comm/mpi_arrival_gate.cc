#include "core/comm/mpi_arrival_gate.h"

#include <algorithm>
#include <thread>

#include "core/comm/mpi_short_sleep.h"

namespace zero {

int WaitForArrival(MPI_Comm comm, std::chrono::steady_clock::time_point deadline,
                   std::mutex* serial, const ArrivalGateOptions& options) {
  using Clock = std::chrono::steady_clock;
  auto call = [serial](auto f) {
    if (serial == nullptr) return f();
    std::lock_guard<std::mutex> l(*serial);
    return f();
  };
  MPI_Request req;
  int rc = call([&] { return MPI_Ibarrier(comm, &req); });
  if (rc != MPI_SUCCESS) return rc;
  const auto spin_until = Clock::now() + options.spin;
  auto sleep = options.first_sleep;
  for (;;) {
    int done = 0;
    rc = call([&] { return MPI_Test(&req, &done, MPI_STATUS_IGNORE); });
    if (rc != MPI_SUCCESS) return rc;
    if (done) return MPI_SUCCESS;
    const auto now = Clock::now();
    if (now > deadline) return kArrivalTimedOut;
    if (now < spin_until) {
      std::this_thread::yield();
      continue;
    }
    // Progress of the barrier happens inside MPI_Test; between tests the
    // thread sleeps, so an absent peer costs wake-ups, not a core.
    MpiShortSleep(std::min(sleep, std::chrono::duration_cast<std::chrono::microseconds>(
                                                    deadline - now) + std::chrono::microseconds(1)));
    sleep = std::min(sleep * 2, options.max_sleep);
  }
}

int PostArrival(MPI_Comm comm, MPI_Request* arrival, std::mutex* serial) {
  if (serial == nullptr) return MPI_Ibarrier(comm, arrival);
  std::lock_guard<std::mutex> l(*serial);
  return MPI_Ibarrier(comm, arrival);
}

int WaitArrivedAndDone(MPI_Request* arrival, int count, MPI_Request* ops,
                       std::chrono::steady_clock::time_point deadline, std::mutex* serial,
                       const ArrivalGateOptions& options) {
  using Clock = std::chrono::steady_clock;
  auto call = [serial](auto f) {
    if (serial == nullptr) return f();
    std::lock_guard<std::mutex> l(*serial);
    return f();
  };
  auto test = [&](MPI_Request* r, int* done) {
    return call([&] { return MPI_Test(r, done, MPI_STATUS_IGNORE); });
  };
  auto test_ops = [&](int* done) {
    return call([&] { return MPI_Testall(count, ops, done, MPI_STATUSES_IGNORE); });
  };
  int rc = MPI_SUCCESS, arrived = arrival == nullptr, done = 0;
  if (!arrived) {
    const auto spin_until = Clock::now() + options.spin;
    auto sleep = options.first_sleep;
    for (;;) {
      // A test of the barrier progresses the collective too (MPI_Test
      // drives the whole progress engine), and the collective cannot end
      // before every rank has arrived: one test per wake-up, not two, so a
      // late peer costs this rank half the CPU.
      if ((rc = test(arrival, &arrived)) != MPI_SUCCESS) return rc;
      if (arrived) break;
      const auto now = Clock::now();
      if (now > deadline) return kArrivalTimedOut;
      if (now < spin_until) {
        std::this_thread::yield();
        continue;
      }
      MpiShortSleep(
          std::min(sleep, std::chrono::duration_cast<std::chrono::microseconds>(deadline - now) +
                              std::chrono::microseconds(1)));
      sleep = std::min(sleep * 2, options.max_sleep);
    }
  }
  // Every rank is in the collective (or, with no gate, may be): what is
  // left is the transfer itself.
  auto sleep = std::chrono::microseconds(5);
  const bool sleeps = options.transfer_max_sleep.count() > 0;
  const auto sleep_from = sleeps ? Clock::now() + options.transfer_spin : Clock::time_point::max();
  for (unsigned i = 1; !done; ++i) {
    if ((rc = test_ops(&done)) != MPI_SUCCESS) return rc;
    if ((i & 63) == 0 && !done && Clock::now() > deadline) return kArrivalTimedOut;
    // Eight tests per wake-up while the sleeps grow; one once they are at
    // their longest (a peer that lost its core: each test is a yield in
    // OpenMPI's progress loop, and eight of them per wake-up took over a
    // quarter of a 300 ms wait's time as CPU at 4 ranks on 2 cores).
    const bool longest = sleep >= options.transfer_max_sleep;
    if (sleeps && !done && (longest || (i & 7) == 0) && Clock::now() > sleep_from) {
      MpiShortSleep(sleep);
      // Past 1 ms of sleeping the peer is late, not slow: the sleeps grow
      // to the gate's longest, so a late peer costs fewer wake-ups.
      const auto cap = Clock::now() > sleep_from + std::chrono::milliseconds(1)
                           ? std::max(options.transfer_max_sleep, options.max_sleep)
                           : options.transfer_max_sleep;
      sleep = std::min(sleep * 2, cap);
    }
  }
  return MPI_SUCCESS;
}

}  // namespace zero
