// The periodic progress line on rank 0 (steps_per_print), as DeepSpeed
// prints it: step, loss scale, gradient norm, lr, skips, samples/s.
#ifndef ZERO_CORE_ENGINE_STEP_LOG_H_
#define ZERO_CORE_ENGINE_STEP_LOG_H_

#include <chrono>
#include <cstdint>

#include "core/engine/optimizer_boundary.h"

namespace zero {

class StepLog {
 public:
  StepLog(int rank, int steps_per_print)
      : rank_(rank), every_(steps_per_print), last_print_(std::chrono::steady_clock::now()) {}
  void ReportSamples(int64_t n) { samples_ += n; }
  // After an optimizer boundary.
  void MaybePrint(const StepInfo& info, const StepCounters& counters);

 private:
  const int rank_, every_;
  int64_t samples_ = 0, samples_at_print_ = 0;
  std::chrono::steady_clock::time_point last_print_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_STEP_LOG_H_
