// Per-element Lion (DeepSpeed's FusedLion / DeepSpeedCPULion, after Chen et
// al., "Symbolic Discovery of Optimization Algorithms"): the sign of an
// interpolation of momentum and gradient, decoupled weight decay, one moment
// (exp_avg). One definition for CPU and CUDA kernels.
#ifndef ZERO_KERNELS_LION_MATH_H_
#define ZERO_KERNELS_LION_MATH_H_

#include "kernels/hd.h"

namespace zero {
namespace math {

// Step-invariant scalars of one Lion step, computed once on the host.
struct LionScalars {
  float lr;
  float beta1, beta2;
  float weight_decay;
  float decay;       // 1 - lr * weight_decay, multiplies the param first
  float grad_scale;  // multiplies the raw gradient (unscale, clip)
};

ZERO_HD LionScalars MakeLionScalars(float lr, float beta1, float beta2, float weight_decay,
                                    float grad_scale) {
  LionScalars s;
  s.lr = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.weight_decay = weight_decay;
  s.decay = 1.0f - lr * weight_decay;
  s.grad_scale = grad_scale;
  return s;
}

// -1, 0 or +1 (0 for 0 and NaN: a NaN never reaches here, the step skips).
ZERO_HD float SignOf(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

// Updates one element: p (fp32 master) and m (exp_avg) in place; g is the
// raw gradient.
ZERO_HD void LionUpdate(const LionScalars& s, float g, float* p, float* m) {
  float grad = g * s.grad_scale;
  float param = *p;
  float c = s.beta1 * *m + (1.0f - s.beta1) * grad;
  if (s.weight_decay != 0.0f) param = param * s.decay;
  *p = param - s.lr * SignOf(c);
  *m = s.beta2 * *m + (1.0f - s.beta2) * grad;
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_LION_MATH_H_
