// Lion as DeepSpeed's FusedLion / DeepSpeedCPULion (kernels/lion_math.h):
// one moment, exp_avg; betas and weight_decay from optimizer.params.
#include "core/optim/optimizer.h"

namespace zero {
namespace {

class LionOptimizer : public Optimizer {
 public:
  explicit LionOptimizer(const Config& c) : c_(c) {}
  const char* name() const override { return "lion"; }
  std::vector<const char*> moments() const override { return {"exp_avg"}; }
  math::OptimScalars Scalars(double lr, int64_t, float grad_scale) const override {
    math::OptimScalars s{};
    s.kind = math::kOptimLion;
    s.lion = math::MakeLionScalars(static_cast<float>(lr), static_cast<float>(c_.beta1),
                                   static_cast<float>(c_.beta2),
                                   static_cast<float>(c_.weight_decay), grad_scale);
    return s;
  }

 private:
  Config c_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeLionOptimizer(const Config& c) {
  return std::make_unique<LionOptimizer>(c);
}

}  // namespace zero
