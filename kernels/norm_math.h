// Gradient checks and reductions per element: unscale, finiteness, squared
// norm. Sums accumulate in double so a finite fp16/bf16 gradient never
// overflows the norm: a non-finite global sum of squares means a non-finite
// gradient somewhere (the overflow test and the norm are one all-reduce).
#ifndef ZERO_KERNELS_NORM_MATH_H_
#define ZERO_KERNELS_NORM_MATH_H_

#include <math.h>

#include "kernels/hd.h"

namespace zero {
namespace math {

ZERO_HD bool IsFinite(float x) { return isfinite(x); }

ZERO_HD double SquaredTerm(float g) { return (double)g * (double)g; }

// DeepSpeed's fused unscale + clip: the factor that multiplies raw (scaled)
// gradients. clip = max(1, (norm/scale + 1e-6) / max_norm), factor =
// 1 / (clip * scale). `scaled_norm` is the L2 norm of the raw gradients.
ZERO_HD double UnscaleClipFactor(double scaled_norm, double loss_scale,
                                 double max_norm) {
  double clip = 1.0;
  if (max_norm > 0.0) {
    double c = (scaled_norm / loss_scale + 1e-6) / max_norm;
    if (c > 1.0) clip = c;
  }
  return 1.0 / (clip * loss_scale);
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_NORM_MATH_H_
