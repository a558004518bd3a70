// NCCL backend: collectives on device memory (CudaDevice buffers), one NCCL
// communicator per rank bootstrapped over MPI (rank 0's ncclUniqueId is
// broadcast over the MPI communicator). Built only under --config=cuda.
//
// Every call enqueues on the collective stream, after the work already
// enqueued on `wait_stream` (the compute stream that produced the data), and
// returns when the stream has finished it, like the other backends. Waiting
// polls ncclCommGetAsyncError and cudaStreamQuery; past timeout_seconds() the
// communicator is aborted (ncclCommAbort), the call returns DeadlineExceeded
// and every later call Aborted: a dead peer is an error, not a hang.
//
// Uneven pieces (AllGatherV / ReduceScatterV with unequal counts) are run as
// one NCCL group of per-rank ncclBroadcast / ncclReduce calls, each rooted at
// the rank that owns the piece; equal counts (the usual ZeRO layout, which
// pads every group to a multiple of the world size) take ncclAllGather /
// ncclReduceScatter. Padding the uneven case instead would move
// (W-1) * (max - min) extra elements and need a scratch buffer and two copies;
// the grouped calls move exactly the data and work in place.
#ifndef ZERO_CORE_COMM_NCCL_COMMUNICATOR_H_
#define ZERO_CORE_COMM_NCCL_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"

namespace zero {

struct NcclOptions {
  // An MPI_Comm* owned by the caller; null means MPI_COMM_WORLD. MPI is
  // initialized (MPI_THREAD_MULTIPLE) if nobody has.
  const void* mpi_comm = nullptr;
  int cuda_device = 0;
  // cudaStream_t for the collectives (e.g. CudaDevice::comm_stream()); null:
  // the communicator creates its own.
  void* stream = nullptr;
  // cudaStream_t each collective waits for first (e.g.
  // CudaDevice::compute_stream()); null: none.
  void* wait_stream = nullptr;
  // Bounds bootstrap; later copied into set_timeout_seconds().
  double timeout_seconds = 300.0;
};

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    const NcclOptions& options);

}  // namespace zero

#endif  // ZERO_CORE_COMM_NCCL_COMMUNICATOR_H_
