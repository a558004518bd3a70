// What engines on thread ranks measure, for the memory estimator's tests
// (estimate_test, muon_memory_test): each rank registers the same params,
// runs optimizer steps (a gather/release forward and a backward over every
// trainable param) and reports zero_stats after each; and the estimator's
// tolerance, within 2 % of the measurement.
#ifndef ZERO_TESTS_TESTING_MEASURE_RANKS_H_
#define ZERO_TESTS_TESTING_MEASURE_RANKS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/engine/param_registry.h"

namespace zero {
namespace testing {

struct RankRun {
  std::vector<EngineStats> after;  // after each step
  int64_t device_allocated = -1;   // an off-host device's bytes after the last step
};

// Called on every rank before step `step`'s forward (0 .. steps-1) and once
// more after the last step (step == steps); an error fails that rank.
using StepHook = std::function<absl::Status(int rank, int step, Communicator* comm)>;

// `steps` optimizer steps of an engine of `config` over `params` (registered
// in that order; init values are not read) on `world` thread ranks, with an
// OffHostDevice (tests/testing/off_host_device.h) when `off_host`. A failed
// rank fails the test and leaves its RankRun empty.
std::vector<RankRun> MeasureOnThreadRanks(const Config& config, int world, bool off_host,
                                          const std::vector<ParamSpec>& params, int steps,
                                          const StepHook& hook = nullptr);

// EXPECT that `estimated` is within 2 % of `measured` (both zero together).
void ExpectNear2(const char* what, int64_t estimated, int64_t measured, int rank);

// An estimate's model-state categories for one rank; `buffers` this rank's
// (with Muon, its own Muon buffers in place of the busiest rank's).
struct EstimatedBytes {
  int64_t param = 0, grad = 0, master = 0, optimizer = 0, frozen = 0, buffers = 0;
};

// EXPECT each category, and their sum, within 2 % of rank `rank`'s stats
// (buffers without stage 3's gathered params, which the estimate's live
// peak counts apart).
void ExpectNearStats(const EstimatedBytes& e, const EngineStats& s, int rank);

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_MEASURE_RANKS_H_
