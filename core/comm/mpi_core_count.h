// This node's ranks against its cores: each rank runs a compute thread and
// a comm thread that waits in MPI, and how MPI should wait (spin, yield,
// sleep) depends on whether they have a core each.
#ifndef ZERO_CORE_COMM_MPI_CORE_COUNT_H_
#define ZERO_CORE_COMM_MPI_CORE_COUNT_H_

namespace zero {

// Ranks on this node (OpenMPI tells; else one per node is assumed).
unsigned LocalRanks();

// The node's cores (at least 1).
unsigned Cores();

// Whether this node's ranks, each with a compute thread and a comm thread
// that waits in MPI, outnumber its cores.
bool ThreadsOutnumberCores();

// Whether this node's ranks alone outnumber its cores (OpenMPI then yields
// in its progress loop by itself).
bool RanksOutnumberCores();

}  // namespace zero

#endif  // ZERO_CORE_COMM_MPI_CORE_COUNT_H_
