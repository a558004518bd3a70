// Per-target (Highway) Adam update of one vector of lanes, every line
// mirroring one line of math::AdamUpdate (kernels/adam_math.h), no FMA
// contraction: the SIMD loops over fp32, bf16 and 8-bit moments share it.
// Included by the SIMD .cc files after highway.h, once per target (the
// include guard toggles with HWY_TARGET_TOGGLE).
#if defined(ZERO_KERNELS_CPU_ADAM_VEC_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZERO_KERNELS_CPU_ADAM_VEC_INL_H_
#undef ZERO_KERNELS_CPU_ADAM_VEC_INL_H_
#else
#define ZERO_KERNELS_CPU_ADAM_VEC_INL_H_
#endif

#include "hwy/highway.h"
#include "kernels/adam_math.h"

HWY_BEFORE_NAMESPACE();
namespace zero {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// math::AdamScalars broadcast once per loop.
template <class D>
struct AdamVecScalars {
  hn::Vec<D> gs, wd, b1, one_b1, b2, one_b2, isb2, eps, bc1, lr;
  AdamVecScalars(D d, const math::AdamScalars& s)
      : gs(hn::Set(d, s.grad_scale)),
        wd(hn::Set(d, s.weight_decay)),
        b1(hn::Set(d, s.beta1)),
        one_b1(hn::Set(d, 1.0f - s.beta1)),
        b2(hn::Set(d, s.beta2)),
        one_b2(hn::Set(d, 1.0f - s.beta2)),
        isb2(hn::Set(d, s.inv_sqrt_bias_correction2)),
        eps(hn::Set(d, s.eps)),
        bc1(hn::Set(d, s.bias_correction1)),
        lr(hn::Set(d, s.lr)) {}
};

// Raw gradient g, param, moments in m, v (updated); returns the new param.
// kL2: weight decay added to the gradient (Adam); kDecoupledWd: AdamW's.
template <bool kL2, bool kDecoupledWd, class D, class V = hn::Vec<D>>
HWY_INLINE V AdamVec(const AdamVecScalars<D>& c, V g, V param, V* m, V* v) {
  auto grad = hn::Mul(g, c.gs);
  if (kL2) grad = hn::Add(grad, hn::Mul(c.wd, param));
  *m = hn::Add(hn::Mul(c.b1, *m), hn::Mul(c.one_b1, grad));
  *v = hn::Add(hn::Mul(c.b2, *v), hn::Mul(hn::Mul(c.one_b2, grad), grad));
  const auto denom = hn::Add(hn::Mul(hn::Sqrt(*v), c.isb2), c.eps);
  auto update = hn::Div(hn::Div(*m, c.bc1), denom);
  if (kDecoupledWd) update = hn::Add(update, hn::Mul(c.wd, param));
  return hn::Sub(param, hn::Mul(c.lr, update));
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace zero
HWY_AFTER_NAMESPACE();

#endif  // ZERO_KERNELS_CPU_ADAM_VEC_INL_H_
