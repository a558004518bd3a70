#include "tests/testing/rank_expect.h"

#include <cstdio>

namespace zero {
namespace testing {
namespace {

int g_passed = 0, g_failed = 0;

}  // namespace

void Expect(bool ok, int rank, const std::string& what) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  std::printf("[rank %d] FAILED: %s\n", rank, what.c_str());
  std::fflush(stdout);
}

int SumChecksOverRanks(Communicator* comm, const std::string& name) {
  double counts[2] = {static_cast<double>(g_passed), static_cast<double>(g_failed)};
  (void)comm->AllReduce(counts, 2, ReduceOp::kSum);
  if (comm->rank() == 0) {
    std::printf("%s world %d: %.0f passed, %.0f failed\n", name.c_str(), comm->world_size(),
                counts[0], counts[1]);
  }
  return counts[1] == 0 ? 0 : 1;
}

}  // namespace testing
}  // namespace zero
