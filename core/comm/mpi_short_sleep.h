// The sleeps an MPI wait takes between tests of its requests, on time.
// Linux lets a sleeping thread's timer fire up to its timer slack late
// (50 us by default): a 5 us sleep took ~55 us, so a wait that backs off
// into sleeps (mpi_arrival_gate.h, MpiCommunicator's Wait) noticed a
// finished transfer tens of microseconds late, once per sleep
// (bench/README.md, "Waiting under load").
#ifndef ZERO_CORE_COMM_MPI_SHORT_SLEEP_H_
#define ZERO_CORE_COMM_MPI_SHORT_SLEEP_H_

#include <chrono>

namespace zero {

// Sleeps `d` with the calling thread's timer slack set to 1 us (set once
// per thread, on its first short sleep; it is a per-thread setting, so
// the threads that never wait in MPI keep theirs).
void MpiShortSleep(std::chrono::microseconds d);

}  // namespace zero

#endif  // ZERO_CORE_COMM_MPI_SHORT_SLEEP_H_
