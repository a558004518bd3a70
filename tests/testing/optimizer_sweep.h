// The sweep the optimizer tests share (muon_test, optimizer_kinds_test,
// moments_format_test): stages 0-3, worlds 1 and 3, fp32 and bf16 working
// copies, each case's engine on thread ranks against the double-precision
// reference of tests/testing/mlp_harness.h; and offload at world 3 giving
// the in-memory run's bits.
#ifndef ZERO_TESTS_TESTING_OPTIMIZER_SWEEP_H_
#define ZERO_TESTS_TESTING_OPTIMIZER_SWEEP_H_

#include <ostream>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {

struct SweepCase {
  int stage;
  int world;
  DType dtype;
};

// Every case, stage outermost and dtype innermost, for
// ::testing::ValuesIn in INSTANTIATE_TEST_SUITE_P.
std::vector<SweepCase> StagesWorldsDtypes();

// The case in a test name: "stage2_world3_bf16".
std::string SweepCaseName(const SweepCase& s);

// How GoogleTest prints the case (--gtest_list_tests, failures).
void PrintTo(const SweepCase& s, std::ostream* os);

// fp32: the engine's float arithmetic (Newton-Schulz included) against
// double; bf16: gradients and the working copy rounded to 8 bits, ten bf16
// epsilons (as zero_stages_test).
double SweepTolerance(DType t);

// After 1, 3 and 10 steps the engine of `c` on `world` thread ranks is
// within `tol` of the double reference, and that reference moved more than
// ten fp32 tolerances from the initial params. `what` (may be empty) leads
// the failure message: "<what> after N steps".
void ExpectMatchesReferenceStepByStep(const Config& c, int world, double tol,
                                      const std::string& what);

// NVMe offload of `c`'s optimizer state (in a fresh dir named `dir`) at 3
// ranks gives `memory`'s bits (the in-memory run of `c` at 3 ranks).
void ExpectNvmeOffloadGivesTheBits(const Config& c, const MlpResult& memory,
                                   const std::string& dir);

// Beside an off-host device (tests/testing/off_host_device.h), at 3 ranks:
// CPU offload gives the bits of the state on that device, and those are
// within `tol` of `memory` (the in-memory run of `c` at 3 ranks).
void ExpectCpuOffloadGivesTheOnDeviceBits(const Config& c, const MlpResult& memory, double tol);

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_OPTIMIZER_SWEEP_H_
