// Compiled once per SIMD target by hwy/foreach_target.h; the HWY_ONCE part
// at the end dispatches to the best target the CPU supports.
#include "kernels/cpu/widen_simd.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/widen_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/widen-inl.h"
#include "kernels/norm_math.h"

HWY_BEFORE_NAMESPACE();
namespace zero {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void F16ToF32TileImpl(const uint16_t* src, float* dst, size_t n, float scale) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const auto k = hn::Set(df, scale);
  const bool scaled = scale != 1.0f;
  size_t i = 0;
  for (; i + N <= n; i += N) {
    auto f = LoadF16AsF32(df, src + i);
    if (scaled) f = hn::Mul(f, k);
    hn::StoreU(f, df, dst + i);
  }
  for (; i < n; ++i) {
    const float f = math::HalfToFloat(src[i]);
    dst[i] = scaled ? f * scale : f;
  }
}

void Bf16ToF32TileImpl(const uint16_t* src, float* dst, size_t n, float scale) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const auto k = hn::Set(df, scale);
  const bool scaled = scale != 1.0f;
  size_t i = 0;
  for (; i + N <= n; i += N) {
    auto f = LoadBf16AsF32(df, src + i);
    if (scaled) f = hn::Mul(f, k);
    hn::StoreU(f, df, dst + i);
  }
  for (; i < n; ++i) {
    const float f = math::Bf16ToFloat(src[i]);
    dst[i] = scaled ? f * scale : f;
  }
}

void ScaleF32TileImpl(const float* src, float* dst, size_t n, float scale) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const auto k = hn::Set(df, scale);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, src + i), k), df, dst + i);
  for (; i < n; ++i) dst[i] = src[i] * scale;
}

// kSquareLanes accumulators as kV vectors of N doubles: vector j holds
// acc[j*N .. j*N+N), so any N that divides kSquareLanes adds the same terms
// in the same order.
void AccumulateSquaresImpl(const float* x, size_t n, double* acc) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  constexpr size_t N = hn::MaxLanes(dd);
  size_t i = 0;
  if constexpr (N >= 2 && kSquareLanes % N == 0) {
    constexpr size_t kV = kSquareLanes / N;
    using V = decltype(hn::Zero(dd));
    V a[kV];
#pragma GCC unroll 16
    for (size_t j = 0; j < kV; ++j) a[j] = hn::LoadU(dd, acc + j * N);
    for (; i + kSquareLanes <= n; i += kSquareLanes) {
      // Unrolled, so the accumulators stay in registers.
#pragma GCC unroll 16
      for (size_t j = 0; j < kV; ++j) {
        // MulAdd is exact here: a float times a float fits a double's
        // mantissa, so the fused and the separate add round alike.
        const auto g = hn::PromoteTo(dd, hn::LoadU(df, x + i + j * N));
        a[j] = hn::MulAdd(g, g, a[j]);
      }
    }
#pragma GCC unroll 16
    for (size_t j = 0; j < kV; ++j) hn::StoreU(a[j], dd, acc + j * N);
  }
  for (; i < n; ++i) acc[i % kSquareLanes] += math::SquaredTerm(x[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace zero
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zero {
namespace cpu {

HWY_EXPORT(F16ToF32TileImpl);
HWY_EXPORT(Bf16ToF32TileImpl);
HWY_EXPORT(ScaleF32TileImpl);
HWY_EXPORT(AccumulateSquaresImpl);

void F16ToF32Tile(const uint16_t* src, float* dst, size_t n, float scale) {
  HWY_DYNAMIC_DISPATCH(F16ToF32TileImpl)(src, dst, n, scale);
}

void Bf16ToF32Tile(const uint16_t* src, float* dst, size_t n, float scale) {
  HWY_DYNAMIC_DISPATCH(Bf16ToF32TileImpl)(src, dst, n, scale);
}

void ScaleF32Tile(const float* src, float* dst, size_t n, float scale) {
  HWY_DYNAMIC_DISPATCH(ScaleF32TileImpl)(src, dst, n, scale);
}

void AccumulateSquares(const float* x, size_t n, double* acc) {
  HWY_DYNAMIC_DISPATCH(AccumulateSquaresImpl)(x, n, acc);
}

}  // namespace cpu
}  // namespace zero
#endif  // HWY_ONCE
