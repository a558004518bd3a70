#include "core/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace zero {

LossScaler::LossScaler(bool dynamic, double static_scale,
                       int initial_scale_power, int scale_window,
                       int hysteresis, bool consecutive_hysteresis,
                       double min_scale)
    : dynamic_(dynamic),
      scale_window_(scale_window),
      delayed_shift_(hysteresis),
      consecutive_hysteresis_(consecutive_hysteresis),
      min_scale_(min_scale) {
  s_.cur_scale = dynamic ? std::ldexp(1.0, initial_scale_power) : static_scale;
  s_.cur_hysteresis = hysteresis;
}

absl::Status LossScaler::Update(bool overflow) {
  if (!dynamic_) {
    ++s_.cur_iter;
    return absl::OkStatus();
  }
  constexpr double kFactor = 2.0;
  if (overflow) {
    if (delayed_shift_ == 1 || s_.cur_hysteresis == 1) {
      if (s_.cur_scale == min_scale_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "fp16 loss scale already at minimum (min_loss_scale = ", min_scale_,
            ") and gradients still overflow: cannot decrease the scale"));
      }
      s_.cur_scale = std::max(s_.cur_scale / kFactor, min_scale_);
    } else {
      s_.cur_hysteresis -= 1;
    }
    s_.last_overflow_iter = s_.cur_iter;
  } else {
    if (consecutive_hysteresis_) s_.cur_hysteresis = delayed_shift_;
    if ((s_.cur_iter - s_.last_overflow_iter) % scale_window_ == 0) {
      if (!consecutive_hysteresis_) s_.cur_hysteresis = delayed_shift_;
      s_.cur_scale *= kFactor;
    }
  }
  ++s_.cur_iter;
  return absl::OkStatus();
}

}  // namespace zero
