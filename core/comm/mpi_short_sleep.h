// The sleeps an MPI wait takes between tests of its requests, on time.
// Linux lets a sleeping thread's timer fire up to its timer slack late
// (50 us by default): a 5 us sleep took ~55 us, so a wait that backs off
// into sleeps (mpi_arrival_gate.h, MpiCommunicator's Wait) noticed a
// finished transfer tens of microseconds late, once per sleep
// (bench/README.md, "Waiting under load").
#ifndef ZERO_CORE_COMM_MPI_SHORT_SLEEP_H_
#define ZERO_CORE_COMM_MPI_SHORT_SLEEP_H_

#include <chrono>
#include <cstdint>

#include "core/comm/local_doorbell.h"

namespace zero {

// Sleeps `d` with the calling thread's timer slack set to 1 us (set once
// per thread, on its first short sleep; it is a per-thread setting, so
// the threads that never wait in MPI keep theirs).
void MpiShortSleep(std::chrono::microseconds d);

// The same sleep on `bell` (local_doorbell.h), when there is one: a peer's
// ring ends it early, and it never lasts longer than `d`. `seen`: the
// bell's word read before the test that found the wait unfinished. true:
// rung (the next test should find the peer's progress).
bool MpiShortSleepOrRing(LocalDoorbell* bell, uint32_t seen, std::chrono::microseconds d);

}  // namespace zero

#endif  // ZERO_CORE_COMM_MPI_SHORT_SLEEP_H_
