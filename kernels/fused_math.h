// Per-element bodies of the fused CUDA kernels (kernels/cuda/): each composes
// the primitives of cast_math.h, adam_math.h and norm_math.h and adds no
// arithmetic of its own, so host tests of these bodies check exactly what a
// GPU thread computes for one element.
#ifndef ZERO_KERNELS_FUSED_MATH_H_
#define ZERO_KERNELS_FUSED_MATH_H_

#include <stdint.h>

#include "kernels/adam_math.h"
#include "kernels/cast_math.h"
#include "kernels/hd.h"
#include "kernels/norm_math.h"

namespace zero {
namespace math {

// Storage of one element type: the bits in memory and their fp32 value.
struct F32Storage {
  typedef float T;
  static ZERO_HD float Load(T x) { return x; }
  static ZERO_HD T Store(float f) { return f; }
};
struct F16Storage {
  typedef uint16_t T;
  static ZERO_HD float Load(T x) { return HalfToFloat(x); }
  static ZERO_HD T Store(float f) { return FloatToHalf(f); }
};
struct BF16Storage {
  typedef uint16_t T;
  static ZERO_HD float Load(T x) { return Bf16ToFloat(x); }
  static ZERO_HD T Store(float f) { return FloatToBf16(f); }
};

// Cast of one element from storage In to storage Out (through fp32).
template <class In, class Out>
ZERO_HD typename Out::T CastElement(typename In::T x) {
  return Out::Store(In::Load(x));
}

// One element of the fused optimizer pass: read the raw gradient in its own
// type, update fp32 master/m/v (AdamUpdate applies s.grad_scale), and return
// the new working-precision value of the param.
template <class Grad, class Working>
ZERO_HD typename Working::T AdamCastElement(const AdamScalars& s,
                                            typename Grad::T g, float* p,
                                            float* m, float* v) {
  AdamUpdate(s, Grad::Load(g), p, m, v);
  return Working::Store(*p);
}

// One element of SGD (math::SgdUpdate on fp32 p and the momentum buffer),
// returning the new working-precision value of the param.
template <class Working>
ZERO_HD typename Working::T SgdCastElement(const SgdScalars& s, float g,
                                           float* p, float* buf) {
  SgdUpdate(s, g, p, buf);
  return Working::Store(*p);
}

// Gradient accumulation: dst + src summed in fp32, stored back as S.
template <class S>
ZERO_HD typename S::T AccumulateElement(typename S::T dst, typename S::T src) {
  return S::Store(S::Load(dst) + S::Load(src));
}

// dst + src * scale with an fp32 src, stored back as S.
template <class S>
ZERO_HD typename S::T AccumulateScaledElement(typename S::T dst, float src,
                                              float scale) {
  return S::Store(S::Load(dst) + src * scale);
}

// Unscale one gradient element: returns g * factor and sets *nonfinite when
// the input or the result is inf/NaN (the result can overflow when factor > 1).
ZERO_HD float UnscaleElement(float g, float factor, int* nonfinite) {
  float out = g * factor;
  if (!IsFinite(g) || !IsFinite(out)) *nonfinite = 1;
  return out;
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_FUSED_MATH_H_
