// One optimizer step's scalars, whichever optimizer (core/optim/optimizer.h
// chooses it once from the config), and its per-element update over the
// fp32 state arrays: the master p and up to two moments s1, s2, in the
// order the optimizer lays them out. The devices' kernels dispatch on
// `kind`; each optimizer's math stays in its own kernels/*_math.h.
#ifndef ZERO_KERNELS_OPTIM_MATH_H_
#define ZERO_KERNELS_OPTIM_MATH_H_

#include "kernels/adagrad_math.h"
#include "kernels/adam_math.h"
#include "kernels/hd.h"
#include "kernels/lion_math.h"
#include "kernels/moments_format_math.h"

namespace zero {
namespace math {

// Fixed values: kernels and tests switch on them.
enum OptimKind { kOptimAdam = 0, kOptimSgd = 1, kOptimLion = 2, kOptimAdagrad = 3 };

// The scalars of `kind`'s step; the other members are unused.
struct OptimScalars {
  int kind;
  AdamScalars adam;     // s1 = exp_avg, s2 = exp_avg_sq
  SgdScalars sgd;       // s1 = momentum buffer (null without momentum)
  LionScalars lion;     // s1 = exp_avg
  AdagradScalars adagrad;  // s1 = exp_avg_sq
  // Adam's moments narrower than fp32 (kernels/moments_format_math.h): s1
  // is then their packed array, s2 unused.
  int moments_format;
};

// One element; s2 (and s1 where unused) may point at a scratch float.
ZERO_HD void OptimUpdate(const OptimScalars& s, float g, float* p, float* s1, float* s2) {
  switch (s.kind) {
    case kOptimAdam: AdamUpdate(s.adam, g, p, s1, s2); break;
    case kOptimSgd: SgdUpdate(s.sgd, g, p, s1); break;
    case kOptimLion: LionUpdate(s.lion, g, p, s1); break;
    case kOptimAdagrad: AdagradUpdate(s.adagrad, g, p, s1); break;
  }
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_OPTIM_MATH_H_
