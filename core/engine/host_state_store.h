// ZeRO-Offload on a GPU: master weights and moments in host memory, updated
// by the CPU. Pieces of the owned range stream through two pairs of host
// buffers (page-locked when offload_optimizer.pin_memory): while the CPU
// updates piece k, the gradients of piece k+1 come down and the working copy
// of piece k-1 goes up.
#ifndef ZERO_CORE_ENGINE_HOST_STATE_STORE_H_
#define ZERO_CORE_ENGINE_HOST_STATE_STORE_H_

#include "core/engine/memory_state_store.h"

namespace zero {

class HostStateStore : public DeviceStateStore {
 public:
  HostStateStore(EngineContext* ctx, ShardedState* sharded)
      : DeviceStateStore(ctx, ctx->host), sharded_(sharded) {}

  absl::Status Update(const OptimizerUpdate& u) override;
  absl::StatusOr<const float*> MasterOnDevice(int g, int64_t begin, int64_t len,
                                              DeviceBuffer* scratch) override;
  absl::Status CastMaster(int g, void* dst) override;

 private:
  ShardedState* sharded_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_HOST_STATE_STORE_H_
