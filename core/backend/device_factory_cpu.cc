// The backend factory of the default (CPU-only) build.
#include "absl/strings/str_cat.h"
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
    return absl::UnimplementedError(absl::StrCat(
        "device cuda:", ordinal, ": this libzero_c was built without CUDA "
        "(build with bazel --config=cuda)"));
  }
  return absl::InvalidArgumentError(absl::StrCat("device: unknown kind '", kind, "'"));
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclComm(const void* mpi_comm, int,
                                                           double timeout_seconds) {
  if (GpuStandinSelected()) return MakeStandinNcclComm(mpi_comm, timeout_seconds);
  return absl::UnimplementedError(
      "nccl communicator: this libzero_c was built without CUDA "
      "(build with bazel --config=cuda)");
}

}  // namespace zero
