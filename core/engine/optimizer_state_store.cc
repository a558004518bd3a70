#include "core/engine/optimizer_state_store.h"

#include "core/common/status_macros.h"
#include "core/engine/host_state_store.h"
#include "core/engine/memory_state_store.h"
#include "core/engine/nvme_state_store.h"
#include "core/engine/sharded_state.h"
#include "core/optim/optimizer.h"

namespace zero {

std::atomic<bool> g_fp32_master_aliasing{true};
void SetFp32MasterAliasing(bool on) { g_fp32_master_aliasing = on; }

int StateArrays(const Config& c) { return MakeOptimizer(c)->state_arrays(); }

absl::StatusOr<std::unique_ptr<OptimizerStateStore>> MakeOptimizerStateStore(
    EngineContext* ctx, ShardedState* sharded) {
  const std::vector<int64_t> lens = sharded->OwnedLengths();
  switch (ctx->config.offload_optimizer.device) {
    case OffloadDevice::kNvme: {
      auto s = std::make_unique<NvmeStateStore>(ctx);
      RETURN_IF_ERROR(s->Create(lens));
      return std::unique_ptr<OptimizerStateStore>(std::move(s));
    }
    case OffloadDevice::kCpu:
      // On a host device the state already lives in host memory.
      if (!ctx->device->host_accessible()) {
        auto s = std::make_unique<HostStateStore>(ctx, sharded);
        RETURN_IF_ERROR(s->Allocate(lens));
        return std::unique_ptr<OptimizerStateStore>(std::move(s));
      }
      break;
    case OffloadDevice::kNone:
      break;
  }
  // fp32 with the working copy's owned range in the same memory (not in a
  // param file or host memory): the master is that range.
  const bool alias = g_fp32_master_aliasing.load() && ctx->dtype() == DType::kF32 &&
                     !sharded->params_on_nvme() && !sharded->params_on_host();
  auto s = std::make_unique<DeviceStateStore>(ctx, ctx->device);
  RETURN_IF_ERROR(s->Allocate(lens, alias ? sharded : nullptr));
  return std::unique_ptr<OptimizerStateStore>(std::move(s));
}

}  // namespace zero
