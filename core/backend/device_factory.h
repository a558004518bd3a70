// Devices and device communicators by name, so the core never names a
// backend: "cpu" always; "cuda" (and NCCL) when built with --config=cuda.
#ifndef ZERO_CORE_BACKEND_DEVICE_FACTORY_H_
#define ZERO_CORE_BACKEND_DEVICE_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"
#include "core/device/device.h"

namespace zero {

absl::StatusOr<std::unique_ptr<Device>> MakeDevice(const std::string& kind,
                                                   int ordinal);

// An NCCL communicator bootstrapped over `mpi_comm` (an MPI_Comm*, or null
// for MPI_COMM_WORLD) on CUDA device `ordinal`.
absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclComm(
    const void* mpi_comm, int ordinal, double timeout_seconds);

}  // namespace zero

#endif  // ZERO_CORE_BACKEND_DEVICE_FACTORY_H_
