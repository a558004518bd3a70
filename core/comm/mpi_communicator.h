// OpenMPI backend: the default for CPU ranks launched by mpirun or Slurm.
#ifndef ZERO_CORE_COMM_MPI_COMMUNICATOR_H_
#define ZERO_CORE_COMM_MPI_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"

namespace zero {

// A communicator over a duplicate of `*mpi_comm` (an MPI_Comm owned by the
// caller), or of MPI_COMM_WORLD when null. Initializes MPI with
// MPI_THREAD_MULTIPLE if nobody has, and then finalizes it at exit.
absl::StatusOr<std::unique_ptr<Communicator>> MakeMpiCommunicator(
    const void* mpi_comm);

}  // namespace zero

#endif  // ZERO_CORE_COMM_MPI_COMMUNICATOR_H_
