// Compiled once per SIMD target by hwy/foreach_target.h; the HWY_ONCE part
// at the end dispatches to the best target the CPU supports.
#include "kernels/cpu/adagrad_simd.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adagrad_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/optim_simd.h"
#include "kernels/cpu/widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zero {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Every line mirrors one line of math::AdagradUpdate (kernels/adagrad_math.h).
template <bool kWd, int kG>
HWY_INLINE void AdagradLoop(const math::AdagradScalars& s, const void* g, float* p, float* v,
                            size_t n, float* w) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto gs = hn::Set(d, s.grad_scale);
  const auto wd = hn::Set(d, s.weight_decay);
  const auto eps = hn::Set(d, s.eps);
  const auto lr = hn::Set(d, s.lr);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    auto grad = hn::Mul(LoadGrad<kG>(d, g, i), gs);
    const auto param = hn::LoadU(d, p + i);
    if (kWd) grad = hn::Add(grad, hn::Mul(wd, param));
    const auto vv = hn::Add(hn::LoadU(d, v + i), hn::Mul(grad, grad));
    const auto denom = hn::Add(hn::Sqrt(vv), eps);
    const auto np = hn::Sub(param, hn::Mul(lr, hn::Div(grad, denom)));
    hn::StoreU(np, d, p + i);
    hn::StoreU(vv, d, v + i);
    if (w) hn::StoreU(np, d, w + i);
  }
  for (; i < n; ++i) {
    math::AdagradUpdate(s, GradAt<kG>(g, i), &p[i], &v[i]);
    if (w) w[i] = p[i];
  }
}

template <int kG>
HWY_INLINE void AdagradDispatch(const math::AdagradScalars& s, const void* g, float* p,
                                float* v, size_t n, float* w) {
  if (s.weight_decay != 0.0f) return AdagradLoop<true, kG>(s, g, p, v, n, w);
  return AdagradLoop<false, kG>(s, g, p, v, n, w);
}

// gt: GradKind.
void AdagradTileRawImpl(const math::AdagradScalars& s, const void* g, int gt, float* p,
                        float* v, size_t n, float* w) {
  if (gt == kGradBf16) return AdagradDispatch<kGradBf16>(s, g, p, v, n, w);
  if (gt == kGradF16) return AdagradDispatch<kGradF16>(s, g, p, v, n, w);
  return AdagradDispatch<kGradF32>(s, g, p, v, n, w);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace zero
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zero {
namespace cpu {

HWY_EXPORT(AdagradTileRawImpl);

void AdagradTileRaw(const math::AdagradScalars& s, const void* g, DType gt, float* p,
                    float* v, size_t n, float* w) {
  HWY_DYNAMIC_DISPATCH(AdagradTileRawImpl)(s, g, GradKindOf(gt), p, v, n, w);
}

}  // namespace cpu
}  // namespace zero
#endif  // HWY_ONCE
