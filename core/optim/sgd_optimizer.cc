// SGD as torch.optim.SGD (kernels/adam_math.h, SgdUpdate): a momentum buffer
// only when momentum is non-zero.
#include "core/optim/optimizer.h"

namespace zero {
namespace {

class SgdOptimizer : public Optimizer {
 public:
  explicit SgdOptimizer(const Config& c) : c_(c) {}
  const char* name() const override { return "sgd"; }
  std::vector<const char*> moments() const override {
    if (c_.momentum == 0.0) return {};
    return {"momentum"};
  }
  math::OptimScalars Scalars(double lr, int64_t step, float grad_scale) const override {
    math::OptimScalars s{};
    s.kind = math::kOptimSgd;
    s.sgd.lr = static_cast<float>(lr);
    s.sgd.momentum = static_cast<float>(c_.momentum);
    s.sgd.dampening = static_cast<float>(c_.dampening);
    s.sgd.weight_decay = static_cast<float>(c_.weight_decay);
    s.sgd.grad_scale = grad_scale;
    s.sgd.nesterov = c_.nesterov;
    s.sgd.first_step = step == 1;
    return s;
  }

 private:
  Config c_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeSgdOptimizer(const Config& c) {
  return std::make_unique<SgdOptimizer>(c);
}

}  // namespace zero
