#include "core/optim/optimizer.h"

namespace zero {

std::unique_ptr<Optimizer> MakeOptimizer(const Config& c) {
  switch (c.optimizer) {
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW: return MakeAdamOptimizer(c);
    case OptimizerType::kSgd: return MakeSgdOptimizer(c);
    case OptimizerType::kLion: return MakeLionOptimizer(c);
    case OptimizerType::kAdagrad: return MakeAdagradOptimizer(c);
    case OptimizerType::kMuon: return MakeMuonOptimizer(c);
  }
  return MakeAdamOptimizer(c);
}

}  // namespace zero
