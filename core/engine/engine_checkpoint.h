// The engine's side of checkpoints (core/ckpt/ does the files): what a save
// may see (a ShardView over the parts), the collective preconditions, and
// after a load the working copy rebuilt from the loaded masters.
#ifndef ZERO_CORE_ENGINE_ENGINE_CHECKPOINT_H_
#define ZERO_CORE_ENGINE_ENGINE_CHECKPOINT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/ckpt/async_saver.h"
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
  // options.async: returns once this rank's state is snapshotted; the
  // files are written in the background (docs/ARCHITECTURE.md,
  // "Asynchronous checkpoints"). Every call here first waits for a
  // background save in flight and returns its failure instead of its own
  // work.
  absl::Status Save(const std::string& dir, const std::string& tag,
                    const ckpt::SaveOptions& options);
  // COLLECTIVE. Also with every param released.
  absl::Status Load(const std::string& dir, const std::string& tag,
                    const ckpt::LoadOptions& options);
  // Waits for a background save in flight; its status, once (the same on
  // every rank).
  absl::Status WaitForSave();
  bool save_in_flight() const { return saver_.pending() && !saver_.finished(); }
  ckpt::SaveTiming last_timing() const;

 private:
  absl::Status Precondition(const char* call);
  absl::Status SaveAsync(const std::string& dir, const std::string& tag,
                         const ckpt::SaveOptions& options);
  std::string Describe(const std::string& dir, const std::string& tag) const;
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
  // The background save's own channel (made at the first async save) and
  // the saver; the saver goes first, joining its thread.
  std::unique_ptr<Communicator> save_comm_;
  ckpt::AsyncSaver saver_;
  std::string in_flight_;  // what the pending save becomes as last_checkpoint
  ckpt::SaveTiming timing_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_ENGINE_CHECKPOINT_H_
