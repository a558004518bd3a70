// DeepSpeed's loss scaler for fp16 (runtime/fp16/loss_scaler.py), step by
// step: dynamic (loss_scale 0) with hysteresis and a growth window, or static.
// bf16 and fp32 use a static scale of 1.
#ifndef ZERO_CORE_OPTIM_LOSS_SCALER_H_
#define ZERO_CORE_OPTIM_LOSS_SCALER_H_

#include <cstdint>

#include "absl/status/status.h"

namespace zero {

struct LossScalerState {
  double cur_scale = 1.0;
  int64_t cur_iter = 0;
  int64_t last_overflow_iter = -1;
  int cur_hysteresis = 1;
};

class LossScaler {
 public:
  // dynamic: DeepSpeed's DynamicLossScaler; else a static scale.
  LossScaler(bool dynamic, double static_scale, int initial_scale_power,
             int scale_window, int hysteresis, bool consecutive_hysteresis,
             double min_scale);

  double scale() const { return s_.cur_scale; }
  bool dynamic() const { return dynamic_; }

  // Call once per optimizer boundary with whether any rank saw a non-finite
  // gradient. Fails (FailedPrecondition) on overflow at the minimum scale,
  // as DeepSpeed raises "Current loss scale already at minimum".
  absl::Status Update(bool overflow);

  const LossScalerState& state() const { return s_; }
  void set_state(const LossScalerState& s) { s_ = s; }

 private:
  bool dynamic_;
  int scale_window_;
  int delayed_shift_;  // hysteresis
  bool consecutive_hysteresis_;
  double min_scale_;
  LossScalerState s_;
};

}  // namespace zero

#endif  // ZERO_CORE_OPTIM_LOSS_SCALER_H_
