// Waits for every rank of an MPI communicator to reach the same collective
// without spinning through the wait. OpenMPI's blocking collectives (and
// MPI_Wait) busy-poll shared memory until the last peer arrives: a rank
// that reaches a collective first burns a core for as long as its peers
// compute, which on a node with fewer cores than threads is taken from
// those peers (bench/README.md, "Waiting without spinning"). The gate is an
// MPI_Ibarrier tested with a short yielding spin and then sleeps that grow
// to a cap, so a long wait costs a few wake-ups instead of a core, and the
// collective that follows starts with every rank present.
#ifndef ZERO_CORE_COMM_MPI_ARRIVAL_GATE_H_
#define ZERO_CORE_COMM_MPI_ARRIVAL_GATE_H_

#include <mpi.h>

#include <chrono>
#include <mutex>

#include "core/comm/local_doorbell.h"

namespace zero {

// Returned by WaitForArrival instead of an MPI error code when the
// deadline passed first (the barrier request stays pending: the caller
// treats the communicator as broken).
constexpr int kArrivalTimedOut = -1;

// How long the gate spins (yielding) before it sleeps, and the longest
// sleep: a rank that arrives last waits at most about `max_sleep` for the
// earlier ones to notice, spinning inside the collective meanwhile.
struct ArrivalGateOptions {
  std::chrono::microseconds spin{50};
  std::chrono::microseconds first_sleep{20};
  std::chrono::microseconds max_sleep{250};
  // WaitArrivedAndDone's transfer: zero tests back to back; otherwise
  // back to back for `transfer_spin`, then eight tests and a sleep of 5 us
  // doubling up to this, in turn. For a node whose ranks outnumber its
  // cores (no gate there): a peer that has not got to the collective has
  // no core, and back-to-back tests (each a sched_yield in OpenMPI's
  // progress loop) took half the comm stream's CPU at stage 3, 4 ranks on
  // 2 cores. The spin first: a transfer that moves in fragments (no
  // single-copy shared memory) needs a test per fragment, and sleeping from
  // the start cut 4-rank all-gathers of 256K+ elements and broadcasts of
  // 64K+ to 0.3-0.7x raw MPI's speed there (bench/README.md, "Waiting at 4
  // ranks on 2 cores"); the communicator sets the spin to the transfer's
  // time at ~4 GB/s, at least 100 us.
  std::chrono::microseconds transfer_max_sleep{0};
  std::chrono::microseconds transfer_spin{100};
  // The communicator's local doorbell (local_doorbell.h), or null: the
  // waits' sleeps (the same lengths) then sleep on it, so a peer's ring
  // ends them early, and the wait rings its peers after posting, after a
  // test that followed a ring, and when its requests are done.
  LocalDoorbell* doorbell = nullptr;
};

// Posts an MPI_Ibarrier on `comm` and tests it until every rank has posted
// theirs or `deadline` passes. `serial`: held around each MPI call when MPI
// runs below MPI_THREAD_MULTIPLE (null otherwise); never held while
// sleeping. Returns MPI_SUCCESS, an MPI error code, or kArrivalTimedOut.
int WaitForArrival(MPI_Comm comm, std::chrono::steady_clock::time_point deadline,
                   std::mutex* serial, const ArrivalGateOptions& options = {});

// The gate folded into a non-blocking collective (bench/README.md,
// "Collectives on the calling thread"): `arrival` is the gate's
// MPI_Ibarrier, posted by every rank just before the `count` requests of
// one collective, `ops` (a non-blocking collective, or sends and receives), or
// null for no gate. Until the barrier completes (a peer has not arrived)
// all are tested with the gate's spin-then-sleep; from then on, or with
// no gate, `ops` are tested back to back, as a blocking call would (OpenMPI's
// mpi_yield_when_idle, when set, yields inside each test), so a transfer
// that needs this rank's progress is never left waiting on a sleep (unless
// options.transfer_max_sleep asks for sleeps: more ranks than cores). All
// requests complete before it returns MPI_SUCCESS. `deadline`, `serial`
// and the result as WaitForArrival's; on kArrivalTimedOut or an error the
// requests may still be pending (the communicator is then broken).
int PostArrival(MPI_Comm comm, MPI_Request* arrival, std::mutex* serial);
int WaitArrivedAndDone(MPI_Request* arrival, int count, MPI_Request* ops,
                       std::chrono::steady_clock::time_point deadline, std::mutex* serial,
                       const ArrivalGateOptions& options = {});

}  // namespace zero

#endif  // ZERO_CORE_COMM_MPI_ARRIVAL_GATE_H_
