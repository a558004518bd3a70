// The backend factory of the default (CPU-only) build.
#include "absl/strings/str_cat.h"
#include "core/backend/device_factory.h"
#include "core/device/guarded_device.h"

namespace zero {

absl::StatusOr<std::unique_ptr<Device>> MakeDevice(const std::string& kind,
                                                   int ordinal) {
  if (kind == "cpu") return MakeCpuDevice();
  // The CPU stand-in for a GPU (core/device/guarded_device.h), in every build.
  if (kind == "standin") return std::unique_ptr<Device>(MakeGuardedDevice());
  if (kind == "cuda") {
    return absl::UnimplementedError(absl::StrCat(
        "device cuda:", ordinal, ": this libzero_c was built without CUDA "
        "(build with bazel --config=cuda)"));
  }
  return absl::InvalidArgumentError(absl::StrCat("device: unknown kind '", kind, "'"));
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclComm(const void*, int,
                                                           double) {
  return absl::UnimplementedError(
      "nccl communicator: this libzero_c was built without CUDA "
      "(build with bazel --config=cuda)");
}

}  // namespace zero
