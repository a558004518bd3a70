// How zero brings MPI up and down, and the process-wide MPI state every
// MPI communicator shares: the thread level MPI runs at (below
// MPI_THREAD_MULTIPLE the communicators' calls take turns) and whether a
// collective was ever left stuck inside MPI (then MPI_Finalize is skipped).
#ifndef ZERO_CORE_COMM_MPI_INIT_POLICY_H_
#define ZERO_CORE_COMM_MPI_INIT_POLICY_H_

#include <mutex>

#include "absl/status/status.h"

namespace zero {

// Initializes MPI with MPI_THREAD_MULTIPLE if nobody has (and finalizes it
// at exit); accepts an MPI the application initialized with at least
// MPI_THREAD_SERIALIZED.
absl::Status EnsureMpi();

// The mutex every MPI call holds when MPI runs below MPI_THREAD_MULTIPLE;
// null otherwise (the calls need not take turns).
std::mutex* MpiSerialMutex();

// Whether MPI runs below MPI_THREAD_MULTIPLE.
bool MpiSerialized();

// Records that a collective timed out or failed: its request can never
// complete, and MPI_Finalize would wait for it forever, so the exit handler
// skips it.
void MarkMpiBroken();

// Direct mode (ZERO_MPI_WATCHDOG=1, docs/ARCHITECTURE.md "Failures"): the
// calling thread makes each blocking MPI call itself and the process-wide
// watchdog (mpi_watchdog.h) keeps the deadline.
bool DirectModeFromEnv();

}  // namespace zero

#endif  // ZERO_CORE_COMM_MPI_INIT_POLICY_H_
