// Compiled once per SIMD target by hwy/foreach_target.h; the HWY_ONCE part
// at the end dispatches to the best target the CPU supports.
#include "kernels/cpu/lion_simd.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/lion_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/optim_simd.h"
#include "kernels/cpu/widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zero {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Every line mirrors one line of math::LionUpdate (kernels/lion_math.h).
template <bool kWd, int kG>
HWY_INLINE void LionLoop(const math::LionScalars& s, const void* g, float* p, float* m,
                         size_t n, float* w) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto gs = hn::Set(d, s.grad_scale);
  const auto b1 = hn::Set(d, s.beta1);
  const auto one_b1 = hn::Set(d, 1.0f - s.beta1);
  const auto b2 = hn::Set(d, s.beta2);
  const auto one_b2 = hn::Set(d, 1.0f - s.beta2);
  const auto decay = hn::Set(d, s.decay);
  const auto lr = hn::Set(d, s.lr);
  const auto zero = hn::Zero(d);
  const auto one = hn::Set(d, 1.0f);
  const auto minus_one = hn::Set(d, -1.0f);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto grad = hn::Mul(LoadGrad<kG>(d, g, i), gs);
    auto param = hn::LoadU(d, p + i);
    const auto mom = hn::LoadU(d, m + i);
    const auto c = hn::Add(hn::Mul(b1, mom), hn::Mul(one_b1, grad));
    if (kWd) param = hn::Mul(param, decay);
    const auto sign =
        hn::IfThenElse(hn::Gt(c, zero), one, hn::IfThenElse(hn::Lt(c, zero), minus_one, zero));
    const auto np = hn::Sub(param, hn::Mul(lr, sign));
    hn::StoreU(np, d, p + i);
    hn::StoreU(hn::Add(hn::Mul(b2, mom), hn::Mul(one_b2, grad)), d, m + i);
    if (w) hn::StoreU(np, d, w + i);
  }
  for (; i < n; ++i) {
    math::LionUpdate(s, GradAt<kG>(g, i), &p[i], &m[i]);
    if (w) w[i] = p[i];
  }
}

template <int kG>
HWY_INLINE void LionDispatch(const math::LionScalars& s, const void* g, float* p, float* m,
                             size_t n, float* w) {
  if (s.weight_decay != 0.0f) return LionLoop<true, kG>(s, g, p, m, n, w);
  return LionLoop<false, kG>(s, g, p, m, n, w);
}

// gt: GradKind.
void LionTileRawImpl(const math::LionScalars& s, const void* g, int gt, float* p, float* m,
                     size_t n, float* w) {
  if (gt == kGradBf16) return LionDispatch<kGradBf16>(s, g, p, m, n, w);
  if (gt == kGradF16) return LionDispatch<kGradF16>(s, g, p, m, n, w);
  return LionDispatch<kGradF32>(s, g, p, m, n, w);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace zero
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zero {
namespace cpu {

HWY_EXPORT(LionTileRawImpl);

void LionTileRaw(const math::LionScalars& s, const void* g, DType gt, float* p, float* m,
                 size_t n, float* w) {
  HWY_DYNAMIC_DISPATCH(LionTileRawImpl)(s, g, GradKindOf(gt), p, m, n, w);
}

}  // namespace cpu
}  // namespace zero
#endif  // HWY_ONCE
