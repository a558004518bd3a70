// Adam and AdamW as DeepSpeed's FusedAdam (kernels/adam_math.h): exp_avg and
// exp_avg_sq, decoupled weight decay for AdamW or with adam_w_mode.
#include "core/optim/optimizer.h"

namespace zero {
namespace {

class AdamOptimizer : public Optimizer {
 public:
  explicit AdamOptimizer(const Config& c) : c_(c) {}
  const char* name() const override {
    return c_.optimizer == OptimizerType::kAdamW ? "adamw" : "adam";
  }
  std::vector<const char*> moments() const override { return {"exp_avg", "exp_avg_sq"}; }
  math::OptimScalars Scalars(double lr, int64_t step, float grad_scale) const override {
    math::OptimScalars s{};
    s.kind = math::kOptimAdam;
    const bool decoupled = c_.optimizer == OptimizerType::kAdamW || c_.adam_w_mode;
    s.adam = math::MakeAdamScalars(static_cast<float>(lr), static_cast<float>(c_.beta1),
                                   static_cast<float>(c_.beta2), static_cast<float>(c_.eps),
                                   static_cast<float>(c_.weight_decay), decoupled, step,
                                   grad_scale);
    s.moments_format = static_cast<int>(c_.moments_format);
    return s;
  }

 private:
  Config c_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeAdamOptimizer(const Config& c) {
  return std::make_unique<AdamOptimizer>(c);
}

}  // namespace zero
