#include "core/engine/optimizer_state_store.h"

#include "core/common/status_macros.h"
#include "core/engine/host_state_store.h"
#include "core/engine/memory_state_store.h"
#include "core/engine/nvme_state_store.h"
#include "core/engine/sharded_state.h"
#include "core/optim/optimizer.h"

namespace zero {

int StateArrays(const Config& c) {
  // Packed moments are one array after the master (core/engine/packed_moments.h).
  if (c.moments_format != MomentsFormat::kF32) return 2;
  return MakeOptimizer(c)->state_arrays();
}

absl::StatusOr<std::unique_ptr<OptimizerStateStore>> MakeOptimizerStateStore(
    EngineContext* ctx, ShardedState* sharded) {
  const std::vector<int64_t> lens = sharded->OwnedLengths();
  // The tier comes from the engine's OffloadPlacement (offload_placement.h).
  switch (ctx->placement.optimizer_state) {
    case StateTier::kNvme: {
      auto s = std::make_unique<NvmeStateStore>(ctx);
      RETURN_IF_ERROR(s->Create(lens));
      return std::unique_ptr<OptimizerStateStore>(std::move(s));
    }
    case StateTier::kHost: {
      auto s = std::make_unique<HostStateStore>(ctx, sharded);
      RETURN_IF_ERROR(s->Allocate(lens));
      return std::unique_ptr<OptimizerStateStore>(std::move(s));
    }
    case StateTier::kDevice:
      break;
  }
  // fp32 with the working copy's owned range in the same memory: the
  // master is that range.
  const bool alias = ctx->placement.master_aliases_working;
  auto s = std::make_unique<DeviceStateStore>(ctx, ctx->device);
  RETURN_IF_ERROR(s->Allocate(lens, alias ? sharded : nullptr));
  return std::unique_ptr<OptimizerStateStore>(std::move(s));
}

}  // namespace zero
