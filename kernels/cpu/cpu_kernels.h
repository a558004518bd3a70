// CPU kernels over flat arrays: OpenMP threads, SIMD loops, per-element math
// from kernels/*_math.h (the same the CUDA kernels use).
#ifndef ZERO_KERNELS_CPU_CPU_KERNELS_H_
#define ZERO_KERNELS_CPU_CPU_KERNELS_H_

#include <cstdint>

#include "kernels/adam_math.h"
#include "kernels/optim_math.h"
#include "kernels/dtype.h"

namespace zero {
namespace cpu {

// Threads each kernel may use, from any calling thread (0: OpenMP's default).
void SetThreads(int n);

// p, m, v: fp32 master and moments; g: fp32 raw gradients. If `work` is not
// null, the updated p is also written there as `work_dtype` (the working
// copy) in the same pass.
void AdamStep(const math::AdamScalars& s, const float* g, float* p, float* m,
              float* v, int64_t n, void* work, DType work_dtype);

void SgdStep(const math::SgdScalars& s, const float* g, float* p, float* buf,
             int64_t n, void* work, DType work_dtype);

// The optimizer boundary's second pass (docs/ARCHITECTURE.md, "One training
// step"): AdamStep / SgdStep reading the raw gradients `g` of dtype `gt`,
// cast to fp32 one tile at a time, in registers (AdamTileRaw / SgdTileRaw),
// and, when `zero_grad`, zeroing each gradient tile once it was read (the
// next accumulation starts from zero with no further pass). Bitwise equal
// to ToF32(g) + AdamStep + zeroing g.
void AdamStepRawGrad(const math::AdamScalars& s, void* g, DType gt, float* p,
                     float* m, float* v, int64_t n, void* work, DType work_dtype,
                     bool zero_grad);
void SgdStepRawGrad(const math::SgdScalars& s, void* g, DType gt, float* p,
                    float* buf, int64_t n, void* work, DType work_dtype,
                    bool zero_grad);

// One step of whichever optimizer `s.kind` names (kernels/optim_math.h)
// over fp32 state p, s1, s2 (the optimizer's layout; unused ones may be
// null), reading the gradients `g` as stored (dtype gt, widened per tile)
// and, when `zero_grad`, zeroing each tile once read; the updated p also goes
// to `work` as `work_dtype` when non-null. For Adam and SGD bitwise
// AdamStepRawGrad / SgdStepRawGrad; the SIMD tiles are bitwise the scalar
// math of kernels/*_math.h.
void OptimizerStep(const math::OptimScalars& s, void* g, DType gt, float* p, float* s1,
                   float* s2, int64_t n, void* work, DType work_dtype, bool zero_grad);

// dst[i] = float(src[i]) * scale.
void ToF32(const void* src, DType t, float* dst, int64_t n, float scale = 1.0f);
// dst[i] = cast(src[i]).
void FromF32(const float* src, void* dst, DType t, int64_t n);
// dst[i] += src[i], both of dtype t, summed in fp32.
void Accumulate(void* dst, const void* src, DType t, int64_t n);
// dst[i] += src[i] * scale, dst of dtype t, src fp32.
void AccumulateF32(void* dst, const float* src, float scale, DType t,
                   int64_t n);
// Sum of squares of (float) x[i], in double: per block of 32K elements
// kSquareLanes partial sums (widen_simd.h), added in order, then the blocks'
// sums in order — the same bits whatever the thread count or SIMD target.
double SumSquares(const void* x, DType t, int64_t n);
// x[i] *= scale in place, then SumSquares(x): the same bits as ToF32(x, kF32,
// x, n, scale) followed by SumSquares, in one pass (each tile squared while
// in cache).
double ScaleSumSquares(float* x, int64_t n, float scale);

}  // namespace cpu
}  // namespace zero

#endif  // ZERO_KERNELS_CPU_CPU_KERNELS_H_
