#include "core/estimate/registry_estimate.h"

#include <algorithm>

namespace zero {

std::vector<EstimateParam> EstimateParamsOf(const ParamRegistry& registry) {
  const std::vector<SizingParam> sizing = registry.SizingParams();
  std::vector<EstimateParam> out;
  out.reserve(registry.all().size());
  for (size_t i = 0; i < registry.all().size(); ++i) {
    const ParamRecord& p = registry.all()[i];
    EstimateParam e;
    e.numel = p.numel;
    e.ndim = static_cast<int>(p.shape.size());
    e.trainable = p.trainable;
    e.dtype = p.dtype;
    e.min_dim = sizing[i].min_dim;
    e.use_muon = p.use_muon ? 1 : 0;
    // Muon's view of a param of more than two dimensions (MuonMatricesOf):
    // dimension 0 by the product of the rest.
    if (p.use_muon && p.shape.size() > 2) e.min_dim = std::min(p.shape[0], p.numel / p.shape[0]);
    out.push_back(e);
  }
  return out;
}

}  // namespace zero
