// Which rank orthogonalises each Muon matrix (docs/ARCHITECTURE.md, "Muon"):
// Newton-Schulz needs the whole matrix, so each has one owner. Greedy
// largest-first (LPT): matrices by descending cost, ties by index, each to
// the least-loaded rank (ties: the lowest rank). The most-loaded rank then
// carries at most the mean load plus the largest matrix's cost. Pure
// arithmetic: every rank computes the same answer.
#ifndef ZERO_CORE_OPTIM_MUON_OWNERS_H_
#define ZERO_CORE_OPTIM_MUON_OWNERS_H_

#include <cstdint>
#include <vector>

namespace zero {

// owner[i] for matrices of cost[i] (elements), over `world` ranks.
std::vector<int> AssignMuonOwners(const std::vector<int64_t>& cost, int world);

}  // namespace zero

#endif  // ZERO_CORE_OPTIM_MUON_OWNERS_H_
