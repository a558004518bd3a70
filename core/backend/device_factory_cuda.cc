// The backend factory of the CUDA build (--config=cuda).
#include "absl/strings/str_cat.h"
#include "core/comm/nccl_communicator.h"
#include "core/device/cuda_device.h"
#include "core/backend/device_factory.h"
#include "core/backend/standin_select.h"
#include "core/device/guarded_device.h"

namespace zero {

absl::StatusOr<std::unique_ptr<Device>> MakeDevice(const std::string& kind,
                                                   int ordinal) {
  if (kind == "cpu") return MakeCpuDevice();
  // The CPU stand-in for a GPU (core/device/guarded_device.h), in every build.
  if (kind == "standin") return std::unique_ptr<Device>(MakeGuardedDevice());
  // ZERO_GPU_STANDIN=1: "cuda" is the stand-in (core/backend/standin_select.h).
  if (kind == "cuda" && GpuStandinSelected()) {
    return std::unique_ptr<Device>(MakeGuardedDevice());
  }
  if (kind == "cuda") {
    auto d = CudaDevice::Create(ordinal);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Device>(std::move(*d));
  }
  return absl::InvalidArgumentError(absl::StrCat("device: unknown kind '", kind, "'"));
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclComm(
    const void* mpi_comm, int ordinal, double timeout_seconds) {
  if (GpuStandinSelected()) return MakeStandinNcclComm(mpi_comm, timeout_seconds);
  NcclOptions o;
  o.mpi_comm = mpi_comm;
  o.cuda_device = ordinal;
  o.timeout_seconds = timeout_seconds;
  return MakeNcclCommunicator(o);
}

}  // namespace zero
