// Adagrad as DeepSpeed's DeepSpeedCPUAdagrad (kernels/adagrad_math.h): one
// state, exp_avg_sq (the sum of squared gradients, from zero); eps and
// weight_decay (L2) from optimizer.params.
#include "core/optim/optimizer.h"

namespace zero {
namespace {

class AdagradOptimizer : public Optimizer {
 public:
  explicit AdagradOptimizer(const Config& c) : c_(c) {}
  const char* name() const override { return "adagrad"; }
  std::vector<const char*> moments() const override { return {"exp_avg_sq"}; }
  math::OptimScalars Scalars(double lr, int64_t, float grad_scale) const override {
    math::OptimScalars s{};
    s.kind = math::kOptimAdagrad;
    s.adagrad = math::MakeAdagradScalars(static_cast<float>(lr), static_cast<float>(c_.eps),
                                         static_cast<float>(c_.weight_decay), grad_scale);
    return s;
  }

 private:
  Config c_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeAdagradOptimizer(const Config& c) {
  return std::make_unique<AdagradOptimizer>(c);
}

}  // namespace zero
