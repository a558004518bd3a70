// Per-target (Highway) loads that widen fp16 / bf16 to fp32 vectors, bitwise
// as kernels/cast_math.h; included by the SIMD .cc files after highway.h,
// once per target (the include guard toggles with HWY_TARGET_TOGGLE).
#if defined(ZERO_KERNELS_CPU_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZERO_KERNELS_CPU_WIDEN_INL_H_
#undef ZERO_KERNELS_CPU_WIDEN_INL_H_
#else
#define ZERO_KERNELS_CPU_WIDEN_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/cast_math.h"

HWY_BEFORE_NAMESPACE();
namespace zero {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Mirrors math::HalfToFloat in int32 lanes: normal halves rebias the
// exponent (+112 << 23), inf/NaN keep their mantissa under an all-ones
// exponent, subnormals are mant * 2^-24 (exact in fp32), sign or'ed last.
template <class DF>
HWY_INLINE hn::Vec<DF> HalfBitsToF32(DF df, const uint16_t* p) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> d16;
  const auto u = hn::PromoteTo(di, hn::LoadU(d16, p));
  const auto em = hn::And(u, hn::Set(di, 0x7fff));
  const auto sign = hn::ShiftLeft<16>(hn::And(u, hn::Set(di, 0x8000)));
  const auto shifted = hn::ShiftLeft<13>(em);
  const auto sub =
      hn::BitCast(di, hn::Mul(hn::ConvertTo(df, em), hn::Set(df, 5.9604644775390625e-08f)));
  auto r = hn::IfThenElse(hn::Gt(em, hn::Set(di, 0x7bff)),
                          hn::Add(shifted, hn::Set(di, 0x70000000)),
                          hn::Add(shifted, hn::Set(di, 0x38000000)));
  r = hn::IfThenElse(hn::Lt(em, hn::Set(di, 0x400)), sub, r);
  return hn::BitCast(df, hn::Or(r, sign));
}

// Lanes(df) halves at p as fp32. On AVX2 and up F16C converts (exact for
// every half but NaN, which it quiets); a vector holding a NaN takes the
// integer path, so NaN payloads stay as the scalar conversion leaves them.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF16AsF32(DF df, const uint16_t* p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const hn::Rebind<hwy::float16_t, DF> dh;
  const auto f = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  if (HWY_LIKELY(hn::AllFalse(df, hn::IsNaN(f)))) return f;
#endif
  return HalfBitsToF32(df, p);
}

// Lanes(df) bf16 values at p as fp32 (the top 16 bits; exact).
template <class DF>
HWY_INLINE hn::Vec<DF> LoadBf16AsF32(DF df, const uint16_t* p) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}


// Gradients as stored: fp32, bf16 or fp16 (widened in registers).
enum GradKind { kGradF32, kGradBf16, kGradF16 };

template <int kG, class DF>
HWY_INLINE hn::Vec<DF> LoadGrad(DF df, const void* g, size_t i) {
  if constexpr (kG == kGradF32) return hn::LoadU(df, static_cast<const float*>(g) + i);
  if constexpr (kG == kGradBf16) return LoadBf16AsF32(df, static_cast<const uint16_t*>(g) + i);
  if constexpr (kG == kGradF16) return LoadF16AsF32(df, static_cast<const uint16_t*>(g) + i);
}

template <int kG>
HWY_INLINE float GradAt(const void* g, size_t i) {
  if constexpr (kG == kGradF32) return static_cast<const float*>(g)[i];
  if constexpr (kG == kGradBf16) return math::Bf16ToFloat(static_cast<const uint16_t*>(g)[i]);
  if constexpr (kG == kGradF16) return math::HalfToFloat(static_cast<const uint16_t*>(g)[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace zero
HWY_AFTER_NAMESPACE();

#endif  // ZERO_KERNELS_CPU_WIDEN_INL_H_
