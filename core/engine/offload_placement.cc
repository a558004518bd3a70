#include "core/engine/offload_placement.h"

#include "absl/strings/str_cat.h"

namespace zero {
namespace {

// An offload key's tier: "cpu" on a host-memory device is where the state
// is already.
StateTier TierOf(OffloadDevice d, bool host_memory_device) {
  switch (d) {
    case OffloadDevice::kNvme:
      return StateTier::kNvme;
    case OffloadDevice::kCpu:
      return host_memory_device ? StateTier::kDevice : StateTier::kHost;
    case OffloadDevice::kNone:
      break;
  }
  return StateTier::kDevice;
}

}  // namespace

absl::StatusOr<OffloadPlacement> DecideOffloadPlacement(const Config& c,
                                                        bool host_memory_device,
                                                        const std::string& device_name) {
  if (c.offload_param.device != OffloadDevice::kNone && c.stage != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.offload_param.device: expected \"none\" below stage 3, got \"",
        OffloadDeviceName(c.offload_param.device), "\""));
  }
  OffloadPlacement p;
  p.optimizer_state = TierOf(c.offload_optimizer.device, host_memory_device);
  p.params = TierOf(c.offload_param.device, host_memory_device);
  // The delayed update is ZeRO-Offload's: the host updates while the device
  // computes. It needs the master and moments apart from the working copy
  // the forward reads (which stays one update behind): HostStateStore. On
  // the CPU device "cpu" then keeps them there too, its own master beside
  // the working copy ("The delayed update"); with "none" or "nvme" there is
  // no host update to run behind the device's work.
  if (c.offload_optimizer.delayed_update) {
    if (c.offload_optimizer.device != OffloadDevice::kCpu) {
      return absl::InvalidArgumentError(absl::StrCat(
          "zero_optimization.offload_optimizer.delayed_update: needs offload_optimizer.device "
          "\"cpu\" (ZeRO-Offload); with device \"",
          OffloadDeviceName(c.offload_optimizer.device), "\" on device ", device_name,
          " the optimizer does not run on the host apart from the device"));
    }
    p.optimizer_state = StateTier::kHost;
  }
  if (p.params == StateTier::kNvme && p.optimizer_state == StateTier::kHost) {
    return absl::UnimplementedError(absl::StrCat(
        "zero_optimization.offload_param.device: \"nvme\" with "
        "offload_optimizer.device \"cpu\"",
        host_memory_device ? " and offload_optimizer.delayed_update" : "",
        " and model state on device ", device_name,
        " is not supported in this version; use offload_optimizer \"nvme\" or \"none\""));
  }
  p.pin_params = p.params == StateTier::kHost && c.offload_param.pin_memory;
  p.grads_on_nvme =
      c.stage == 3 && host_memory_device && p.optimizer_state == StateTier::kNvme;
  p.master_aliases_working = c.engine_paths.fp32_master_aliasing && c.dtype == DType::kF32 &&
                             p.optimizer_state == StateTier::kDevice &&
                             p.params == StateTier::kDevice;
  return p;
}

}  // namespace zero
