// The optimizer boundary (docs/ARCHITECTURE.md, "One training step"): the
// accumulation counter, and at the last micro-step of an accumulation two
// passes over the owned gradients — reduce what is left; pass 1, the global
// sum of squares (norm and overflow in one all-reduce); DeepSpeed's loss
// scaler and the clip folded into the unscale factor; pass 2, the fused
// optimizer over the state store (raw gradients in, working copy out,
// gradients zeroed) — and the new working copy published to every rank.
#ifndef ZERO_CORE_ENGINE_OPTIMIZER_BOUNDARY_H_
#define ZERO_CORE_ENGINE_OPTIMIZER_BOUNDARY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/engine/engine_context.h"
#include "core/engine/gradient_reducer.h"
#include "core/engine/muon_phase.h"
#include "core/engine/optimizer_state_store.h"
#include "core/engine/param_coordinator.h"
#include "core/engine/sharded_state.h"
#include "core/engine/update_io_pipeline.h"
#include "core/optim/loss_scaler.h"
#include "core/optim/lr_schedule.h"
#include "core/optim/optimizer.h"

namespace zero {

struct StepInfo {
  bool boundary = false;
  bool skipped = false;
  int64_t global_step = 0;
  int64_t skipped_steps = 0;
  double loss_scale = 1.0;
  double grad_norm = 0.0;
  double lr = 0.0;
};

struct StepCounters {
  int64_t global_step = 0, skipped_steps = 0;
  int64_t micro_step = 0;  // micro-steps since the last boundary
};

class OptimizerBoundary {
 public:
  explicit OptimizerBoundary(EngineContext* ctx);

  // The parts it drives; `coordinator` only at stage 3.
  void Wire(ShardedState* sharded, GradientReducer* reducer, OptimizerStateStore* store,
            ParamCoordinator* coordinator) {
    sharded_ = sharded;
    reducer_ = reducer;
    store_ = store;
    coordinator_ = coordinator;
  }

  // With the Muon optimizer, after Wire: the matrices its phase updates
  // (core/engine/muon_phase.h; the boundary's Muon phase, in
  // optimizer_boundary_muon.cc). Refuses what the phase cannot run.
  absl::Status EnableMuon(std::vector<MuonMatrix> matrices);
  const MuonPhase* muon() const { return muon_.get(); }

  // Whether the current micro-step ends an accumulation.
  bool at_boundary() const {
    return counters_.micro_step + 1 == ctx_->config.gradient_accumulation_steps;
  }
  // After the micro-step's reductions finished: counts it and, at the
  // boundary, steps the optimizer.
  absl::StatusOr<StepInfo> EndMicroStep();

  // After the owners updated their shards of the working copy: stages 1-2
  // all-gather the shards; stage 3 refreshes the persistent params. Runs on
  // the comm stream.
  absl::Status PublishWorkingCopy();
  // offload_optimizer.delayed_update: the update started at the last
  // boundary completes and its working copy is published (COLLECTIVE, a
  // no-op elsewhere). At an overflow's skipped step and before save, load
  // and load_safetensors, so that after them the params are current
  // (docs/ARCHITECTURE.md, "Offload").
  absl::Status LandDelayedUpdate();

  const StepCounters& counters() const { return counters_; }
  void set_steps(int64_t global_step, int64_t skipped_steps) {
    counters_.global_step = global_step;
    counters_.skipped_steps = skipped_steps;
  }
  LossScaler& scaler() { return scaler_; }
  const LossScaler& scaler() const { return scaler_; }
  int64_t scratch_bytes() const;

 private:
  // Where this step's passes find the owned gradients (PlanGrads).
  struct GradPlan {
    bool fused = false;     // pass 2 reads raw gradients and zeroes them
    bool scatter = false;   // stage 1's reduce-scatter writes an fp32 target
    bool in_place = false;  // fp32 gradients are their own fp32 copy
    bool raw = false;       // pass 1 and 2 read the gradients as stored
    bool streamed = false;  // stage 3 gradient files, group by group
    std::vector<char> in_grads;  // stage 1: the target is the grads' owned range
    std::vector<void*> src;      // pass 1's source and pass 2's gradients
    DType src_t = DType::kF32;
    std::vector<float*> g32;     // fp32 owned gradients (null: raw only)
  };
  // The phases of one boundary step, in order (docs/ARCHITECTURE.md, "One
  // training step").
  absl::StatusOr<StepInfo> Step();
  absl::StatusOr<GradPlan> PlanGrads();
  // Leftover reductions and pass 1: the global sum of squares (norm and
  // overflow in one all-reduce).
  absl::StatusOr<double> ReduceAndNorm(GradPlan* plan);
  // An overflow: gradients dropped, the scaler backs off, no state moves.
  absl::StatusOr<StepInfo> SkipStep(StepInfo info);
  // Pass 2: the optimizer over the state store, the working copy landed
  // wherever it lives (memory, host shard, param file).
  absl::Status UpdateState(const GradPlan& plan, const math::OptimScalars& scalars);
  // Pass 2's share of one piece: the device's OptimizerStep on elements
  // [begin, begin+len) of group g, with gradients as the plan says.
  absl::Status StepPiece(const GradPlan& plan, const math::OptimScalars& scalars, int g,
                         int64_t begin, int64_t len, float* master, float* s1, float* s2,
                         char* work, bool piped);
  // Where the Muon phase reads the owned gradients: as pass 2 would.
  MuonGradReader MuonGrads(const GradPlan& plan);
  // After the update: files committed, gradients zeroed, the working copy
  // published, the scaler and counters advanced.
  absl::StatusOr<StepInfo> FinishStep(const GradPlan& plan, StepInfo info);

  EngineContext* ctx_;
  std::unique_ptr<Optimizer> optimizer_;  // chosen once from the config
  ShardedState* sharded_ = nullptr;
  GradientReducer* reducer_ = nullptr;
  OptimizerStateStore* store_ = nullptr;
  ParamCoordinator* coordinator_ = nullptr;
  LossScaler scaler_;
  LrSchedule schedule_;
  StepCounters counters_;
  std::vector<DeviceBuffer> g32_;  // fp32 owned gradients, when not in place
  // One group's gradients, raw and fp32, when they stream from files
  // (ShardedState::grads_on_nvme).
  DeviceBuffer stream_raw_, stream_f32_;
  // The streamed update's read-ahead and write-behind (made at the first step).
  std::unique_ptr<UpdateIoPipeline> pipeline_;
  std::unique_ptr<MuonPhase> muon_;  // the Muon optimizer only
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_OPTIMIZER_BOUNDARY_H_
