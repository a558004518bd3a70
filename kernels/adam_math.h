// Per-element optimizer updates (Adam/AdamW as DeepSpeed's FusedAdam, SGD as
// torch.optim.SGD). One definition for CPU and CUDA kernels.
#ifndef ZERO_KERNELS_ADAM_MATH_H_
#define ZERO_KERNELS_ADAM_MATH_H_

#include <math.h>

#include "kernels/hd.h"

namespace zero {
namespace math {

// Step-invariant scalars of one Adam step, computed once on the host.
struct AdamScalars {
  float lr;
  float beta1, beta2, eps;
  float weight_decay;
  float bias_correction1;       // 1 - beta1^t
  float inv_sqrt_bias_correction2;  // 1 / sqrt(1 - beta2^t)
  float grad_scale;             // multiplies the raw gradient (unscale, clip)
  int decoupled;                // AdamW: decay applied to the param, not grad
};

ZERO_HD AdamScalars MakeAdamScalars(float lr, float beta1, float beta2,
                                    float eps, float weight_decay,
                                    int decoupled, long long step,
                                    float grad_scale) {
  AdamScalars s;
  s.lr = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  s.weight_decay = weight_decay;
  s.bias_correction1 = (float)(1.0 - pow((double)beta1, (double)step));
  s.inv_sqrt_bias_correction2 =
      (float)(1.0 / sqrt(1.0 - pow((double)beta2, (double)step)));
  s.grad_scale = grad_scale;
  s.decoupled = decoupled;
  return s;
}

// Updates one element: p (fp32 master), m, v in place; g is the raw gradient.
ZERO_HD void AdamUpdate(const AdamScalars& s, float g, float* p, float* m,
                        float* v) {
  float grad = g * s.grad_scale;
  float param = *p;
  if (!s.decoupled && s.weight_decay != 0.0f) grad += s.weight_decay * param;
  float mm = s.beta1 * *m + (1.0f - s.beta1) * grad;
  float vv = s.beta2 * *v + (1.0f - s.beta2) * grad * grad;
  float denom = sqrtf(vv) * s.inv_sqrt_bias_correction2 + s.eps;
  float update = (mm / s.bias_correction1) / denom;
  if (s.decoupled && s.weight_decay != 0.0f) update += s.weight_decay * param;
  *p = param - s.lr * update;
  *m = mm;
  *v = vv;
}

struct SgdScalars {
  float lr;
  float momentum;
  float dampening;
  float weight_decay;
  float grad_scale;
  int nesterov;
  int first_step;  // torch: the momentum buffer starts as the first gradient
};

ZERO_HD void SgdUpdate(const SgdScalars& s, float g, float* p, float* buf) {
  float grad = g * s.grad_scale;
  float param = *p;
  if (s.weight_decay != 0.0f) grad += s.weight_decay * param;
  if (s.momentum != 0.0f) {
    float b = s.first_step ? grad
                           : s.momentum * *buf + (1.0f - s.dampening) * grad;
    *buf = b;
    grad = s.nesterov ? grad + s.momentum * b : b;
  }
  *p = param - s.lr * grad;
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_ADAM_MATH_H_
