#include "core/engine/step_log.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zero {

void StepLog::MaybePrint(const StepInfo& info, const StepCounters& counters) {
  const int64_t n = counters.global_step + counters.skipped_steps;
  if (rank_ != 0 || every_ <= 0 || n % every_ != 0) return;
  auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - last_print_).count();
  std::string samples;
  if (samples_ > samples_at_print_ && secs > 0) {
    samples = absl::StrCat(" samples/s=",
                           absl::StrFormat("%.1f", (samples_ - samples_at_print_) / secs));
  }
  std::printf("[zero] step=%lld loss_scale=%g grad_norm=%.6g lr=%.6g skipped=%lld%s\n",
              static_cast<long long>(n), info.loss_scale, info.grad_norm, info.lr,
              static_cast<long long>(counters.skipped_steps), samples.c_str());
  std::fflush(stdout);
  last_print_ = now;
  samples_at_print_ = samples_;
}

}  // namespace zero
