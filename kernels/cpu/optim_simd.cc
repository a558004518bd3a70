// Compiled once per SIMD target by hwy/foreach_target.h; the HWY_ONCE part
// at the end dispatches to the best target the CPU supports.
#include "kernels/cpu/optim_simd.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/optim_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/adam_vec-inl.h"
#include "kernels/cpu/widen-inl.h"
#include "kernels/moments_format_math.h"

HWY_BEFORE_NAMESPACE();
namespace zero {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// math::FloatToBf16 of each lane's float bits `u`, in the low 16 bits.
template <class DU, class VU>
HWY_INLINE VU Bf16Bits(DU du, VU u) {
  const auto is_nan = hn::Gt(hn::And(u, hn::Set(du, 0x7fffffffu)), hn::Set(du, 0x7f800000u));
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), lsb)));
  return hn::IfThenElse(is_nan, hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u)), rounded);
}

// AdamVec (kernels/cpu/adam_vec-inl.h) over the tile. kBf16Moments: m
// points at the bf16 format's packed words (exp_avg low half, exp_avg_sq
// high half), widened and rounded in registers: bitwise
// math::AdamUpdateBf16 (kernels/moments_format_math.h); v is unused.
template <bool kL2, bool kDecoupledWd, int kG = kGradF32, bool kBf16Moments = false>
HWY_INLINE void AdamLoop(const math::AdamScalars& s, const void* g, float* p,
                         float* m, float* v, size_t n, float* w) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  uint32_t* mv = reinterpret_cast<uint32_t*>(m);
  const size_t N = hn::Lanes(d);
  const AdamVecScalars<decltype(d)> c(d, s);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto param = hn::LoadU(d, p + i);
    hn::Vec<decltype(d)> mm, vv;
    if constexpr (kBf16Moments) {
      const auto word = hn::LoadU(du, mv + i);
      mm = hn::BitCast(d, hn::ShiftLeft<16>(word));
      vv = hn::BitCast(d, hn::And(word, hn::Set(du, 0xffff0000u)));
    } else {
      mm = hn::LoadU(d, m + i);
      vv = hn::LoadU(d, v + i);
    }
    const auto np = AdamVec<kL2, kDecoupledWd>(c, LoadGrad<kG>(d, g, i), param, &mm, &vv);
    hn::StoreU(np, d, p + i);
    if constexpr (kBf16Moments) {
      const auto lo = Bf16Bits(du, hn::BitCast(du, mm));
      hn::StoreU(hn::Or(lo, hn::ShiftLeft<16>(Bf16Bits(du, hn::BitCast(du, vv)))), du, mv + i);
    } else {
      hn::StoreU(mm, d, m + i);
      hn::StoreU(vv, d, v + i);
    }
    if (w) hn::StoreU(np, d, w + i);
  }
  for (; i < n; ++i) {
    if constexpr (kBf16Moments) {
      math::AdamUpdateBf16(s, GradAt<kG>(g, i), &p[i], &mv[i]);
    } else {
      math::AdamUpdate(s, GradAt<kG>(g, i), &p[i], &m[i], &v[i]);
    }
    if (w) w[i] = p[i];
  }
}

template <int kG>
HWY_INLINE void AdamDispatch(const math::AdamScalars& s, const void* g, float* p, float* m,
                             float* v, size_t n, float* w) {
  if (s.weight_decay == 0.0f) return AdamLoop<false, false, kG>(s, g, p, m, v, n, w);
  if (s.decoupled) return AdamLoop<false, true, kG>(s, g, p, m, v, n, w);
  return AdamLoop<true, false, kG>(s, g, p, m, v, n, w);
}

// gt: 0 fp32, 1 bf16, 2 fp16 (GradKind).
void AdamTileRawImpl(const math::AdamScalars& s, const void* g, int gt, float* p, float* m,
                     float* v, size_t n, float* w) {
  if (gt == kGradBf16) return AdamDispatch<kGradBf16>(s, g, p, m, v, n, w);
  if (gt == kGradF16) return AdamDispatch<kGradF16>(s, g, p, m, v, n, w);
  return AdamDispatch<kGradF32>(s, g, p, m, v, n, w);
}

void AdamTileImpl(const math::AdamScalars& s, const float* g, float* p,
                  float* m, float* v, size_t n, float* w) {
  const bool has_wd = s.weight_decay != 0.0f;
  if (!has_wd) return AdamLoop<false, false>(s, g, p, m, v, n, w);
  if (s.decoupled) return AdamLoop<false, true>(s, g, p, m, v, n, w);
  return AdamLoop<true, false>(s, g, p, m, v, n, w);
}

void AdamTileBf16MomentsImpl(const math::AdamScalars& s, const float* g, float* p,
                             uint32_t* mv, size_t n) {
  float* m = reinterpret_cast<float*>(mv);
  if (s.weight_decay == 0.0f) return AdamLoop<false, false, kGradF32, true>(s, g, p, m, nullptr, n, nullptr);
  if (s.decoupled) return AdamLoop<false, true, kGradF32, true>(s, g, p, m, nullptr, n, nullptr);
  return AdamLoop<true, false, kGradF32, true>(s, g, p, m, nullptr, n, nullptr);
}

// Mirrors math::SgdUpdate.
template <int kG>
HWY_INLINE void SgdLoop(const math::SgdScalars& s, const void* g, float* p, float* buf,
                        size_t n, float* w) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto gs = hn::Set(d, s.grad_scale);
  const auto wd = hn::Set(d, s.weight_decay);
  const auto mom = hn::Set(d, s.momentum);
  const auto one_damp = hn::Set(d, 1.0f - s.dampening);
  const auto lr = hn::Set(d, s.lr);
  const bool has_wd = s.weight_decay != 0.0f, has_mom = s.momentum != 0.0f;
  size_t i = 0;
  for (; i + N <= n; i += N) {
    auto grad = hn::Mul(LoadGrad<kG>(d, g, i), gs);
    const auto param = hn::LoadU(d, p + i);
    if (has_wd) grad = hn::Add(grad, hn::Mul(wd, param));
    if (has_mom) {
      const auto b = s.first_step
                         ? grad
                         : hn::Add(hn::Mul(mom, hn::LoadU(d, buf + i)),
                                   hn::Mul(one_damp, grad));
      hn::StoreU(b, d, buf + i);
      grad = s.nesterov ? hn::Add(grad, hn::Mul(mom, b)) : b;
    }
    const auto np = hn::Sub(param, hn::Mul(lr, grad));
    hn::StoreU(np, d, p + i);
    if (w) hn::StoreU(np, d, w + i);
  }
  for (; i < n; ++i) {
    float unused = 0.0f;
    math::SgdUpdate(s, GradAt<kG>(g, i), &p[i], buf ? &buf[i] : &unused);
    if (w) w[i] = p[i];
  }
}

void SgdTileImpl(const math::SgdScalars& s, const float* g, float* p, float* buf, size_t n,
                 float* w) {
  SgdLoop<kGradF32>(s, g, p, buf, n, w);
}

// gt: GradKind.
void SgdTileRawImpl(const math::SgdScalars& s, const void* g, int gt, float* p, float* buf,
                    size_t n, float* w) {
  if (gt == kGradBf16) return SgdLoop<kGradBf16>(s, g, p, buf, n, w);
  if (gt == kGradF16) return SgdLoop<kGradF16>(s, g, p, buf, n, w);
  return SgdLoop<kGradF32>(s, g, p, buf, n, w);
}

// Mirrors math::FloatToBf16 with integer lanes.
void ToBf16TileImpl(const float* src, uint16_t* dst, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto r = Bf16Bits(du, hn::BitCast(du, hn::LoadU(df, src + i)));
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, r)), d16, dst + i);
  }
  for (; i < n; ++i) dst[i] = math::FloatToBf16(src[i]);
}

// Mirrors math::FloatToHalf in int32 lanes (all values compared are
// non-negative). Subnormal halves: |x| * 2^24 is exact and Round() is
// round-to-nearest-even, which is what the scalar integer code computes.
void ToF16TileImpl(const float* src, uint16_t* dst, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const size_t N = hn::Lanes(df);
  const auto abs_mask = hn::Set(di, 0x7fffffff);
  const auto sign_mask = hn::Set(di, 0x8000);
  const auto rebias = hn::Set(di, 0x38000000);
  const auto round = hn::Set(di, 0xfff);
  const auto one = hn::Set(di, 1);
  const auto min_normal = hn::Set(di, 0x38800000);
  const auto max_finite = hn::Set(di, 0x477fefff);  // abs > this: inf
  const auto inf_bits = hn::Set(di, 0x7f800000);
  const auto h_inf = hn::Set(di, 0x7c00);
  const auto h_nan = hn::Set(di, 0x7e00);
  const auto two24 = hn::Set(df, 16777216.0f);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::LoadU(df, src + i);
    const auto u = hn::BitCast(di, x);
    const auto sign = hn::And(hn::ShiftRight<16>(u), sign_mask);
    const auto abs = hn::And(u, abs_mask);
    const auto normal = hn::ShiftRight<13>(
        hn::Add(hn::Sub(abs, rebias), hn::Add(round, hn::And(hn::ShiftRight<13>(abs), one))));
    const auto sub = hn::ConvertTo(di, hn::Round(hn::Mul(hn::BitCast(df, abs), two24)));
    auto r = hn::IfThenElse(hn::Lt(abs, min_normal), sub, normal);
    r = hn::IfThenElse(hn::Gt(abs, max_finite), h_inf, r);
    r = hn::IfThenElse(hn::Gt(abs, inf_bits), h_nan, r);
    hn::StoreU(hn::DemoteTo(d16, hn::Or(r, sign)), d16, dst + i);
  }
  for (; i < n; ++i) dst[i] = math::FloatToHalf(src[i]);
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace zero
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zero {
namespace cpu {

HWY_EXPORT(AdamTileImpl);
HWY_EXPORT(AdamTileRawImpl);
HWY_EXPORT(AdamTileBf16MomentsImpl);
HWY_EXPORT(SgdTileImpl);
HWY_EXPORT(SgdTileRawImpl);
HWY_EXPORT(ToBf16TileImpl);
HWY_EXPORT(ToF16TileImpl);
HWY_EXPORT(TargetNameImpl);

void AdamTile(const math::AdamScalars& s, const float* g, float* p, float* m,
              float* v, size_t n, float* w) {
  HWY_DYNAMIC_DISPATCH(AdamTileImpl)(s, g, p, m, v, n, w);
}

void AdamTileRaw(const math::AdamScalars& s, const void* g, DType gt, float* p, float* m,
                 float* v, size_t n, float* w) {
  HWY_DYNAMIC_DISPATCH(AdamTileRawImpl)(s, g, GradKindOf(gt), p, m, v, n, w);
}

void AdamTileBf16Moments(const math::AdamScalars& s, const float* g, float* p, uint32_t* mv,
                         size_t n) {
  HWY_DYNAMIC_DISPATCH(AdamTileBf16MomentsImpl)(s, g, p, mv, n);
}

void SgdTileRaw(const math::SgdScalars& s, const void* g, DType gt, float* p, float* buf,
                size_t n, float* w) {
  HWY_DYNAMIC_DISPATCH(SgdTileRawImpl)(s, g, GradKindOf(gt), p, buf, n, w);
}

void SgdTile(const math::SgdScalars& s, const float* g, float* p, float* buf,
             size_t n, float* w) {
  HWY_DYNAMIC_DISPATCH(SgdTileImpl)(s, g, p, buf, n, w);
}

void ToBf16Tile(const float* src, uint16_t* dst, size_t n) {
  HWY_DYNAMIC_DISPATCH(ToBf16TileImpl)(src, dst, n);
}

void ToF16Tile(const float* src, uint16_t* dst, size_t n) {
  HWY_DYNAMIC_DISPATCH(ToF16TileImpl)(src, dst, n);
}

const char* SimdTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace cpu
}  // namespace zero
#endif  // HWY_ONCE
