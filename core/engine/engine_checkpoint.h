// The engine's side of checkpoints (core/ckpt/ does the files): what a save
// may see (a ShardView over the parts), the collective preconditions, and
// after a load the working copy rebuilt from the loaded masters.
#ifndef ZERO_CORE_ENGINE_ENGINE_CHECKPOINT_H_
#define ZERO_CORE_ENGINE_ENGINE_CHECKPOINT_H_

#include <string>

#include "absl/status/status.h"
#include "core/ckpt/shard_view.h"
#include "core/engine/engine_context.h"
#include "core/engine/gradient_reducer.h"
#include "core/engine/optimizer_boundary.h"
#include "core/engine/optimizer_state_store.h"
#include "core/engine/param_coordinator.h"
#include "core/engine/param_registry.h"
#include "core/engine/sharded_state.h"

namespace zero {

class EngineCheckpoint {
 public:
  // `coordinator` only at stage 3.
  EngineCheckpoint(EngineContext* ctx, ParamRegistry* params, ShardedState* sharded,
                   OptimizerStateStore* store, ParamCoordinator* coordinator,
                   GradientReducer* reducer, OptimizerBoundary* boundary)
      : ctx_(ctx), params_(params), sharded_(sharded), store_(store),
        coordinator_(coordinator), reducer_(reducer), boundary_(boundary) {}

  // COLLECTIVE. Only right after the step() that ends an accumulation.
  absl::Status Save(const std::string& dir, const std::string& tag,
                    const ckpt::SaveOptions& options);
  // COLLECTIVE. Also with every param released.
  absl::Status Load(const std::string& dir, const std::string& tag,
                    const ckpt::LoadOptions& options);

 private:
  absl::Status Precondition(const char* call);
  ckpt::ShardView MakeShardView();
  // Runs on the comm stream.
  absl::Status RebuildWorkingFromMaster();

  EngineContext* ctx_;
  ParamRegistry* params_;
  ShardedState* sharded_;
  OptimizerStateStore* store_;
  ParamCoordinator* coordinator_;
  GradientReducer* reducer_;
  OptimizerBoundary* boundary_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_ENGINE_CHECKPOINT_H_
