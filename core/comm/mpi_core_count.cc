#include "core/comm/mpi_core_count.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace zero {

unsigned LocalRanks() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return local ? static_cast<unsigned>(std::atoi(local)) : 1;
}

unsigned Cores() { return std::max(1u, std::thread::hardware_concurrency()); }

bool ThreadsOutnumberCores() { return 2 * LocalRanks() > Cores(); }

bool RanksOutnumberCores() { return LocalRanks() > Cores(); }

}  // namespace zero
