// The checks of the MPI test mains (mpi_engine_main, mpi_doorbell_main,
// multihost_main): each rank counts its passes and failures, prints each
// failure with its rank, and the counts are summed over the ranks at the end.
#ifndef ZERO_TESTS_TESTING_RANK_EXPECT_H_
#define ZERO_TESTS_TESTING_RANK_EXPECT_H_

#include <string>

#include "core/comm/communicator.h"

namespace zero {
namespace testing {

// Counts one check on `rank`; a failed one prints "[rank R] FAILED: what".
void Expect(bool ok, int rank, const std::string& what);

// Sums every rank's passes and failures over `comm`; rank 0 prints
// "<name> world W: P passed, F failed". Returns the exit code: 0 when no
// rank failed a check, else 1.
int SumChecksOverRanks(Communicator* comm, const std::string& name);

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_RANK_EXPECT_H_
