// Runs a host communicator (mpi, thread) over device memory by staging each
// collective's buffers through host memory: how several ranks share one GPU
// when NCCL refuses them, and how a CUDA engine talks over MPI.
#ifndef ZERO_CORE_COMM_STAGING_COMMUNICATOR_H_
#define ZERO_CORE_COMM_STAGING_COMMUNICATOR_H_

#include <memory>

#include "core/comm/communicator.h"
#include "core/device/device.h"

namespace zero {

// `device` must outlive the result; its Copy() moves bytes in any direction.
std::unique_ptr<Communicator> MakeStagingCommunicator(
    std::unique_ptr<Communicator> inner, Device* device);

}  // namespace zero

#endif  // ZERO_CORE_COMM_STAGING_COMMUNICATOR_H_
