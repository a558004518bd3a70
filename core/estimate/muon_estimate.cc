#include "core/estimate/muon_estimate.h"

#include <cmath>

#include "core/engine/muon_phase.h"
#include "core/estimate/memory_estimate.h"
#include "core/optim/muon_owners.h"
#include "core/optim/optimizer.h"

namespace zero {
namespace {

// Rows of the matrix view: the given smaller side when it divides the
// count, else the largest divisor at most its square root (near square).
int64_t MatrixRows(const EstimateParam& p) {
  if (p.min_dim > 0 && p.numel % p.min_dim == 0) return p.min_dim;
  int64_t rows = 1;
  const int64_t root = static_cast<int64_t>(std::sqrt(static_cast<double>(p.numel)));
  for (int64_t d = root; d >= 1; --d) {
    if (p.numel % d == 0) {
      rows = d;
      break;
    }
  }
  return rows;
}

}  // namespace

std::vector<int64_t> EstimateMuonBytesPerRank(const std::vector<EstimateParam>& params,
                                              const Config& config, const Layout& layout,
                                              int world) {
  // The optimizer says whether it has a Muon phase (Optimizer::muon).
  if (MakeOptimizer(config)->muon() == nullptr) return {};
  // MuonMatricesOf's list: trainable params on Muon, in layout order.
  std::vector<MuonMatrix> matrices;
  std::vector<int64_t> cost;
  for (int li = 0; li < static_cast<int>(layout.params().size()); ++li) {
    const EstimateParam& p = params[layout.params()[li].id];
    const bool on_muon = p.use_muon == -1 ? p.ndim >= 2 : p.use_muon == 1;
    if (!on_muon || p.numel == 0) continue;
    MuonMatrix m;
    m.group = layout.place(li).group;
    m.offset = layout.place(li).offset;
    m.rows = MatrixRows(p);
    m.cols = p.numel / m.rows;
    matrices.push_back(m);
    cost.push_back(m.numel());
  }
  if (matrices.empty()) return {};
  // MuonPhase: an exchange at stages 1-3 over more than one rank.
  const bool exchanges = config.stage >= 1 && world > 1;
  const std::vector<int> owners = AssignMuonOwners(cost, exchanges ? world : 1);
  std::vector<int64_t> bytes(world, 0);
  for (int r = 0; r < world; ++r) {
    bytes[r] = PlanMuonBuffers(matrices, owners, layout, exchanges, exchanges ? r : 0).bytes();
  }
  return bytes;
}

}  // namespace zero
