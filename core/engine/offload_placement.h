// Where the engine keeps each kind of model state, decided in one place from
// the config and the device (docs/ARCHITECTURE.md, "Offload"): the engine
// (Finalize, into EngineContext::placement), its parts (ShardedState,
// MakeOptimizerStateStore) and the memory estimator all read this, so none
// restates the rule.
#ifndef ZERO_CORE_ENGINE_OFFLOAD_PLACEMENT_H_
#define ZERO_CORE_ENGINE_OFFLOAD_PLACEMENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/config/config.h"

namespace zero {

enum class StateTier {
  kDevice,  // the engine device's memory (host memory on the CPU device)
  kHost,    // host memory apart from the device's working copy (ZeRO-Offload)
  kNvme,    // files under an nvme_path
};

struct OffloadPlacement {
  // The fp32 master and the moments: kNvme with offload_optimizer "nvme"
  // (NvmeStateStore); kHost with "cpu" on a device the host cannot touch
  // (ZeRO-Offload: HostStateStore), and with "cpu" and delayed_update on
  // a host-memory device too (the delayed update's master stays apart from
  // the working copy the forward reads); kDevice otherwise (DeviceStateStore;
  // on a host-memory device plain "cpu" changes nothing).
  StateTier optimizer_state = StateTier::kDevice;
  // Stage 3's own working shard: kNvme with offload_param "nvme" (param
  // files), kHost with "cpu" on a device the host cannot touch (uploaded for
  // each gather), kDevice otherwise. Below stage 3 always kDevice.
  StateTier params = StateTier::kDevice;
  // The host shard (params kHost) is page-locked (offload_param.pin_memory).
  bool pin_params = false;
  // Stage 3 with the optimizer state on NVMe and a host-memory device
  // (ZeRO-Infinity on the CPU): the gradient shard in a file per group, so
  // host memory stays bounded. On a GPU it stays in device memory.
  bool grads_on_nvme = false;
  // An fp32 model whose master and working copy are both in the engine's
  // device memory: the master is the working copy's owned range
  // (DeviceStateStore::Allocate), unless EnginePaths turns it off.
  bool master_aliases_working = false;

  // State updated in place on NVMe (the crash rule, "Offload").
  bool any_nvme() const {
    return optimizer_state == StateTier::kNvme || params == StateTier::kNvme;
  }
};

// The placement for `config` on a device whose memory the host can touch
// (`host_memory_device`: the CPU device) or not (a GPU), named
// `device_name` in errors. Refuses offload_param below stage 3,
// offload_optimizer.delayed_update without offload_optimizer "cpu", and
// offload_param "nvme" with the state in HostStateStore (it writes the
// working copy into the device's shard, which a param file does not have).
absl::StatusOr<OffloadPlacement> DecideOffloadPlacement(const Config& config,
                                                        bool host_memory_device,
                                                        const std::string& device_name);

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_OFFLOAD_PLACEMENT_H_
