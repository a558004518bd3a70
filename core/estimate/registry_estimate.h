// The memory estimator's params from the engine's own registry (docs/
// ARCHITECTURE.md, "Memory estimator"): a caller describes params as it
// would register them, ParamRegistry::Register checks them and decides
// frozen vs trainable and Muon's half (MuonDefault for ZERO_MUON_AUTO), and
// the estimate reads those decisions instead of making its own.
#ifndef ZERO_CORE_ESTIMATE_REGISTRY_ESTIMATE_H_
#define ZERO_CORE_ESTIMATE_REGISTRY_ESTIMATE_H_

#include <vector>

#include "core/engine/param_registry.h"
#include "core/estimate/memory_estimate.h"

namespace zero {

// One EstimateParam per registered param, in registration order (the order
// the engine lays trainable params out in): its numel, dimensions, dtype and
// trainable flag; the smaller dimension the "auto" sizes read
// (ParamRegistry::SizingParams); whether Muon updates it (ParamRecord::
// use_muon, as resolved at registration) and its matrix view's smaller side
// (MuonMatricesOf's dimension 0 by the rest).
std::vector<EstimateParam> EstimateParamsOf(const ParamRegistry& registry);

}  // namespace zero

#endif  // ZERO_CORE_ESTIMATE_REGISTRY_ESTIMATE_H_
