// Selecting the CPU stand-in for a GPU (core/device/guarded_device.h) by
// environment, so the bindings' real GPU code path — zero.Comm.nccl(),
// Engine(device="cuda:N"), Comm::nccl, Engine::set_device("cuda", n), the C
// calls under them — runs in the CPU test suite (docs/ARCHITECTURE.md,
// "Devices"). With ZERO_GPU_STANDIN=1 in the environment:
//  - the device "cuda" (any ordinal) is the stand-in device;
//  - an "NCCL" communicator is the NCCL-shaped stand-in communicator
//    (core/backend/standin_comm.h) over an MPI communicator of the same ranks.
// Without it nothing changes: a build without CUDA refuses "cuda".
#ifndef ZERO_CORE_BACKEND_STANDIN_SELECT_H_
#define ZERO_CORE_BACKEND_STANDIN_SELECT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"

namespace zero {

// ZERO_GPU_STANDIN is "1" (read at each call; any other value is off).
bool GpuStandinSelected();

// The NCCL-shaped stand-in over a duplicate of `mpi_comm` (as
// MakeMpiCommunicator), with collectives timing out after timeout_seconds.
absl::StatusOr<std::unique_ptr<Communicator>> MakeStandinNcclComm(const void* mpi_comm,
                                                                  double timeout_seconds);

}  // namespace zero

#endif  // ZERO_CORE_BACKEND_STANDIN_SELECT_H_
