// Muon as DeepSpeed's MuonWithAuxAdam: the hidden matrices (ParamRecord::
// use_muon) take momentum, Newton-Schulz orthogonalisation and decoupled
// weight decay at muon_lr, whole, in the boundary's Muon phase
// (core/engine/muon_phase.h); every other element is AdamW at adam_lr,
// through these Scalars. The state per element is AdamW's: a Muon matrix's
// momentum buffer is its exp_avg, its exp_avg_sq stays zero.
#include "core/optim/optimizer.h"

namespace zero {
namespace {

class MuonOptimizer : public Optimizer {
 public:
  explicit MuonOptimizer(const Config& c) : c_(c) {
    // A schedule scales both halves alike: each half's lr over `lr`.
    const double base = c.lr > 0 ? c.lr : 1.0;
    adam_ratio_ = c.adam_lr >= 0 ? c.adam_lr / base : 1.0;
    muon_.momentum = c.muon_momentum;
    muon_.nesterov = c.muon_nesterov;
    muon_.ns_steps = c.muon_ns_steps;
    muon_.weight_decay = c.weight_decay;
    muon_.lr_ratio = c.muon_lr >= 0 ? c.muon_lr / base : 1.0;
  }
  const char* name() const override { return "muon"; }
  std::vector<const char*> moments() const override { return {"exp_avg", "exp_avg_sq"}; }
  math::OptimScalars Scalars(double lr, int64_t step, float grad_scale) const override {
    math::OptimScalars s{};
    s.kind = math::kOptimAdam;
    s.adam = math::MakeAdamScalars(static_cast<float>(lr * adam_ratio_),
                                   static_cast<float>(c_.beta1), static_cast<float>(c_.beta2),
                                   static_cast<float>(c_.eps),
                                   static_cast<float>(c_.weight_decay), c_.adam_w_mode, step,
                                   grad_scale);
    return s;
  }
  const MuonSettings* muon() const override { return &muon_; }

 private:
  Config c_;
  double adam_ratio_ = 1.0;
  MuonSettings muon_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeMuonOptimizer(const Config& c) {
  return std::make_unique<MuonOptimizer>(c);
}

}  // namespace zero
