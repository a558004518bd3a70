// DeepSpeed's LR schedules (runtime/lr_schedules.py) as closed forms of
// last_batch_iteration. DeepSpeed steps its scheduler after each optimizer
// step, so optimizer step t (0-based, skipped steps not counted) uses
// LrAt(t - 1); LrAt(-1) is the value the scheduler sets at construction.
#ifndef ZERO_CORE_OPTIM_LR_SCHEDULE_H_
#define ZERO_CORE_OPTIM_LR_SCHEDULE_H_

#include <cstdint>

#include "core/config/config.h"

namespace zero {

class LrSchedule {
 public:
  explicit LrSchedule(const Config& c) : c_(c) {}
  double LrAt(int64_t last_batch_iteration) const;
  // The lr of 0-based optimizer step t.
  double LrForStep(int64_t t) const { return LrAt(t - 1); }

 private:
  double WarmupGamma(int64_t it, int64_t warmup) const;
  Config c_;
};

}  // namespace zero

#endif  // ZERO_CORE_OPTIM_LR_SCHEDULE_H_
