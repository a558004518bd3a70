// The Muon phase's host buffers in the memory estimator (docs/
// ARCHITECTURE.md, "Memory estimator" and "Muon"): which params Muon
// updates, their owner ranks, and per rank the bytes PlanMuonBuffers gives
// (core/engine/muon_phase.h), the engine's own sizing.
#ifndef ZERO_CORE_ESTIMATE_MUON_ESTIMATE_H_
#define ZERO_CORE_ESTIMATE_MUON_ESTIMATE_H_

#include <cstdint>
#include <vector>

#include "core/config/config.h"
#include "core/partition/layout.h"

namespace zero {

struct EstimateParam;

// Bytes per rank (index: rank) of the Muon phase's buffers for `params`
// laid out by `layout` (whose LayoutParam::id indexes `params`); empty
// when the optimizer is not Muon or no param is on it.
std::vector<int64_t> EstimateMuonBytesPerRank(const std::vector<EstimateParam>& params,
                                              const Config& config, const Layout& layout,
                                              int world);

}  // namespace zero

#endif  // ZERO_CORE_ESTIMATE_MUON_ESTIMATE_H_
