// Sets up the local doorbell (local_doorbell.h) of an MPI communicator
// whose ranks share one node, or says why it waits on timers instead.
#ifndef ZERO_CORE_COMM_MPI_LOCAL_DOORBELL_H_
#define ZERO_CORE_COMM_MPI_LOCAL_DOORBELL_H_

#include <mpi.h>

#include <memory>

#include "core/comm/local_doorbell.h"

namespace zero {

// Whether waits may sleep on a doorbell: ZERO_MPI_DOORBELL=1 on, =0 off,
// unset the default (docs/ARCHITECTURE.md, "Failures").
bool DoorbellFromEnv();

// Collective over `comm` (every rank calls it, as it makes the
// communicator): local rank 0 creates a shared-memory segment under a name
// unique to the job and broadcasts the name, the others map it, and once
// all have (agreed over `comm`) the name is unlinked. Null, on every rank
// alike, when the ranks span more than one node, the doorbell is off
// (DoorbellFromEnv, any rank) or any rank failed to map it: waits then
// sleep on timers as before. A fallback other than the knob is named in
// one log line per process.
std::unique_ptr<LocalDoorbell> MakeMpiLocalDoorbell(MPI_Comm comm);

}  // namespace zero

#endif  // ZERO_CORE_COMM_MPI_LOCAL_DOORBELL_H_
