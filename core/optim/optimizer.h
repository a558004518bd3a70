// What the engine knows of an optimizer (docs/ARCHITECTURE.md, "How to add
// an optimizer"), chosen once from the config: the fp32 state it keeps per
// owned element after the master (their checkpoint section names, in the
// order its kernels take them), and each step's scalars for the devices'
// OptimizerStep (kernels/optim_math.h). The boundary, the state stores, the
// checkpoint view and the memory estimator ask only this; none of them
// branches on which optimizer it is.
#ifndef ZERO_CORE_OPTIM_OPTIMIZER_H_
#define ZERO_CORE_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "core/config/config.h"
#include "kernels/optim_math.h"

namespace zero {

// Muon's settings for its hidden matrices (core/optim/muon_optimizer.cc);
// every other element takes the optimizer's own Scalars (AdamW).
struct MuonSettings {
  double momentum = 0.95;
  bool nesterov = true;
  int ns_steps = 5;
  double weight_decay = 0.0;
  double lr_ratio = 1.0;  // Muon's lr over the scheduled lr (muon_lr / lr)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // The name a checkpoint's manifest records ("adamw", "lion").
  virtual const char* name() const = 0;
  // Checkpoint section names of the state arrays after the master, as the
  // kernels take them (s1, s2): none, one or two.
  virtual std::vector<const char*> moments() const = 0;
  // The scalars of step `step` (counting from 1) at learning rate `lr`,
  // the raw gradients multiplied by `grad_scale` (unscale and clip).
  virtual math::OptimScalars Scalars(double lr, int64_t step, float grad_scale) const = 0;

  // Non-null for Muon: the matrices it marks are updated whole by the
  // boundary's Muon phase (core/engine/muon_phase.h), not by Scalars.
  virtual const MuonSettings* muon() const { return nullptr; }

  // fp32 arrays per owned element: the master and the moments.
  int state_arrays() const { return 1 + static_cast<int>(moments().size()); }
};

// The optimizer `c.optimizer` names, with c's hyper-parameters.
std::unique_ptr<Optimizer> MakeOptimizer(const Config& c);

// One per optimizer (core/optim/<name>_optimizer.cc).
std::unique_ptr<Optimizer> MakeAdamOptimizer(const Config& c);
std::unique_ptr<Optimizer> MakeSgdOptimizer(const Config& c);
std::unique_ptr<Optimizer> MakeLionOptimizer(const Config& c);
std::unique_ptr<Optimizer> MakeAdagradOptimizer(const Config& c);
std::unique_ptr<Optimizer> MakeMuonOptimizer(const Config& c);

}  // namespace zero

#endif  // ZERO_CORE_OPTIM_OPTIMIZER_H_
