#include "core/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace zero {

double LrSchedule::WarmupGamma(int64_t it, int64_t warmup) const {
  if (c_.warmup_type == WarmupType::kLog) {
    return std::log(static_cast<double>(it + 1)) / std::log(static_cast<double>(warmup));
  }
  return static_cast<double>(it) / static_cast<double>(warmup);
}

double LrSchedule::LrAt(int64_t it) const {
  const int64_t warmup = std::max<int64_t>(2, c_.warmup_num_steps);
  switch (c_.scheduler) {
    case SchedulerType::kNone:
      return c_.lr;
    case SchedulerType::kWarmupLR:
    case SchedulerType::kWarmupDecayLR: {
      if (it < 0) return c_.warmup_min_lr;
      double gamma;
      if (it < warmup) {
        gamma = WarmupGamma(it, warmup);
      } else if (c_.scheduler == SchedulerType::kWarmupLR) {
        gamma = 1.0;
      } else {
        gamma = std::max(0.0, static_cast<double>(c_.total_num_steps - it) /
                                  std::max(1.0, static_cast<double>(
                                                    c_.total_num_steps - warmup)));
      }
      return c_.warmup_min_lr + (c_.warmup_max_lr - c_.warmup_min_lr) * gamma;
    }
    case SchedulerType::kWarmupCosineLR: {
      if (it < 0) return 0.0;
      double ratio;
      if (it < warmup) {
        ratio = c_.warmup_min_ratio + WarmupGamma(it, warmup) * (1.0 - c_.warmup_min_ratio);
      } else {
        const double real_last = static_cast<double>(it - warmup + 1);
        const double real_total = static_cast<double>(c_.total_num_steps - warmup);
        ratio = (1.0 + std::cos(M_PI * real_last / real_total)) / 2.0;
        ratio = std::max(0.0, c_.cos_min_ratio + (1.0 - c_.cos_min_ratio) * ratio);
      }
      return c_.lr * ratio;
    }
  }
  return c_.lr;
}

}  // namespace zero
