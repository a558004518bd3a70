#include "core/optim/muon_owners.h"

#include <algorithm>
#include <numeric>

namespace zero {

std::vector<int> AssignMuonOwners(const std::vector<int64_t>& cost, int world) {
  std::vector<int> order(cost.size()), owner(cost.size(), 0);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] > cost[b]; });
  std::vector<int64_t> load(std::max(world, 1), 0);
  for (int i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = r;
    load[r] += cost[i];
  }
  return owner;
}

}  // namespace zero
