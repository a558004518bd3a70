#include "core/comm/mpi_arrival_gate.h"

#include <algorithm>
#include <thread>

#include "core/comm/mpi_short_sleep.h"

namespace zero {
namespace {

// A wait's rings of its peers' doorbells (ArrivalGateOptions::doorbell):
// one when it starts (its requests are posted: a peer waiting for this
// rank to arrive can test now), one after a test that followed a ring (the
// peer moved, and the test may have moved this rank's part in turn), and
// one when done. The rings after a ring are at most kRingsAfterRing per
// wait: two ranks that both wait for a third would otherwise wake each
// other back and forth for as long as the third is away, a spin by
// another name.
class PeerRings {
 public:
  explicit PeerRings(LocalDoorbell* bell) : bell_(bell) {
    if (bell_ != nullptr) bell_->RingOthers();
  }
  // This rank's word, read before a test.
  uint32_t Seen() const { return bell_ != nullptr ? bell_->Seen() : 0; }
  void Tested(bool done) {
    if (bell_ != nullptr && (done || (rung_ && after_ring_left_ > 0))) {
      if (!done) --after_ring_left_;
      bell_->RingOthers();
    }
    rung_ = false;
  }
  // Sleeps `d` or until rung. true: it slept to its end, and the sleeps'
  // schedule moves on (doubles); a ring keeps the length, so the sleeps
  // grow with the time waited, as timed ones do, not with the peers'
  // rings (growing per ring left a rank sleeping its longest while a
  // peer spun through a fragmented transfer that needs this rank's tests).
  bool Sleep(uint32_t seen, std::chrono::microseconds d) {
    rung_ = MpiShortSleepOrRing(bell_, seen, d);
    return !rung_;
  }

 private:
  static constexpr int kRingsAfterRing = 8;
  LocalDoorbell* bell_;
  bool rung_ = false;
  int after_ring_left_ = kRingsAfterRing;
};

}  // namespace

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
  PeerRings rings(options.doorbell);
  const auto spin_until = Clock::now() + options.spin;
  auto sleep = options.first_sleep;
  for (;;) {
    int done = 0;
    const uint32_t seen = rings.Seen();
    rc = call([&] { return MPI_Test(&req, &done, MPI_STATUS_IGNORE); });
    if (rc != MPI_SUCCESS) return rc;
    rings.Tested(done);
    if (done) return MPI_SUCCESS;
    const auto now = Clock::now();
    if (now > deadline) return kArrivalTimedOut;
    if (now < spin_until) {
      std::this_thread::yield();
      continue;
    }
    // Progress of the barrier happens inside MPI_Test; between tests the
    // thread sleeps, so an absent peer costs wake-ups, not a core.
    if (rings.Sleep(seen, std::min(sleep, std::chrono::duration_cast<std::chrono::microseconds>(
                                              deadline - now) + std::chrono::microseconds(1)))) {
      sleep = std::min(sleep * 2, options.max_sleep);
    }
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
  PeerRings rings(options.doorbell);
  if (!arrived) {
    const auto spin_until = Clock::now() + options.spin;
    auto sleep = options.first_sleep;
    for (;;) {
      // A test of the barrier progresses the collective too (MPI_Test
      // drives the whole progress engine), and the collective cannot end
      // before every rank has arrived: one test per wake-up, not two, so a
      // late peer costs this rank half the CPU.
      const uint32_t seen = rings.Seen();
      if ((rc = test(arrival, &arrived)) != MPI_SUCCESS) return rc;
      rings.Tested(arrived);
      if (arrived) break;
      const auto now = Clock::now();
      if (now > deadline) return kArrivalTimedOut;
      if (now < spin_until) {
        std::this_thread::yield();
        continue;
      }
      if (rings.Sleep(seen, std::min(sleep, std::chrono::duration_cast<std::chrono::microseconds>(
                                                deadline - now) + std::chrono::microseconds(1)))) {
        sleep = std::min(sleep * 2, options.max_sleep);
      }
    }
  }
  // Every rank is in the collective (or, with no gate, may be): what is
  // left is the transfer itself.
  auto sleep = std::chrono::microseconds(5);
  const bool sleeps = options.transfer_max_sleep.count() > 0;
  const auto sleep_from = sleeps ? Clock::now() + options.transfer_spin : Clock::time_point::max();
  for (unsigned i = 1; !done; ++i) {
    const uint32_t seen = rings.Seen();
    if ((rc = test_ops(&done)) != MPI_SUCCESS) return rc;
    rings.Tested(done);
    if ((i & 63) == 0 && !done && Clock::now() > deadline) return kArrivalTimedOut;
    // Eight tests per wake-up while the sleeps grow; one once they are at
    // their longest (a peer that lost its core: each test is a yield in
    // OpenMPI's progress loop, and eight of them per wake-up took over a
    // quarter of a 300 ms wait's time as CPU at 4 ranks on 2 cores).
    const bool longest = sleep >= options.transfer_max_sleep;
    if (sleeps && !done && (longest || (i & 7) == 0) && Clock::now() > sleep_from) {
      if (rings.Sleep(seen, sleep)) {
        // Past 1 ms of sleeping the peer is late, not slow: the sleeps grow
        // to the gate's longest, so a late peer costs fewer wake-ups.
        const auto cap = Clock::now() > sleep_from + std::chrono::milliseconds(1)
                             ? std::max(options.transfer_max_sleep, options.max_sleep)
                             : options.transfer_max_sleep;
        sleep = std::min(sleep * 2, cap);
      }
    }
  }
  return MPI_SUCCESS;
}

}  // namespace zero
