// Moves each collective's buffers into the memory the inner communicator
// works on, and back:
//  - a host communicator (mpi, thread) over device memory: buffers staged
//    through host memory. How several ranks share one GPU when NCCL refuses
//    them, and how a CUDA engine talks over MPI.
//  - a device communicator (nccl) over host memory: buffers staged through
//    device memory. How the engine's scalar bookkeeping (norms, agreement
//    checks) uses NCCL; that traffic is filed under kControl.
#ifndef ZERO_CORE_BACKEND_STAGING_COMMUNICATOR_H_
#define ZERO_CORE_BACKEND_STAGING_COMMUNICATOR_H_

#include <memory>

#include "core/comm/communicator.h"
#include "core/device/device.h"

namespace zero {

// Owns `inner`; stages through host memory. `device` must outlive the
// result; its Copy() moves bytes in any direction.
std::unique_ptr<Communicator> MakeStagingCommunicator(
    std::unique_ptr<Communicator> inner, Device* device);

// Borrows `inner` (which must outlive the result); stages through `device`
// memory and files all traffic under kControl.
std::unique_ptr<Communicator> MakeDeviceControlCommunicator(
    Communicator* inner, Device* device);

}  // namespace zero

#endif  // ZERO_CORE_BACKEND_STAGING_COMMUNICATOR_H_
