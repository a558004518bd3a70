// Per-element Adagrad (DeepSpeed's DeepSpeedCPUAdagrad): L2 weight decay
// folded into the gradient, the running sum of squared gradients
// (exp_avg_sq, starting at zero), no learning-rate decay. One definition for
// CPU and CUDA kernels.
#ifndef ZERO_KERNELS_ADAGRAD_MATH_H_
#define ZERO_KERNELS_ADAGRAD_MATH_H_

#include <math.h>

#include "kernels/hd.h"

namespace zero {
namespace math {

struct AdagradScalars {
  float lr;
  float eps;
  float weight_decay;
  float grad_scale;  // multiplies the raw gradient (unscale, clip)
};

ZERO_HD AdagradScalars MakeAdagradScalars(float lr, float eps, float weight_decay,
                                          float grad_scale) {
  AdagradScalars s;
  s.lr = lr;
  s.eps = eps;
  s.weight_decay = weight_decay;
  s.grad_scale = grad_scale;
  return s;
}

// Updates one element: p (fp32 master) and v (exp_avg_sq) in place; g is the
// raw gradient.
ZERO_HD void AdagradUpdate(const AdagradScalars& s, float g, float* p, float* v) {
  float grad = g * s.grad_scale;
  float param = *p;
  if (s.weight_decay != 0.0f) grad += s.weight_decay * param;
  float vv = *v + grad * grad;
  float denom = sqrtf(vv) + s.eps;
  *p = param - s.lr * (grad / denom);
  *v = vv;
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_ADAGRAD_MATH_H_
