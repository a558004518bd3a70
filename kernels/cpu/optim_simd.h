// Highway (SIMD, dynamic dispatch up to AVX-512) optimizer loops over one
// contiguous tile. Same operation order as kernels/adam_math.h, no FMA
// contraction: results are bitwise those of math::AdamUpdate / SgdUpdate.
// Threads are the caller's business (cpu_kernels.cc splits into tiles).
#ifndef ZERO_KERNELS_CPU_OPTIM_SIMD_H_
#define ZERO_KERNELS_CPU_OPTIM_SIMD_H_

#include <cstddef>
#include <cstdint>

#include "kernels/adam_math.h"
#include "kernels/dtype.h"

namespace zero {
namespace cpu {

// The GradKind (widen-inl.h) of gradients stored as `gt`.
inline int GradKindOf(DType gt) { return gt == DType::kBF16 ? 1 : gt == DType::kF16 ? 2 : 0; }

// `w`, if not null, receives the updated p (fp32 working copy).
void AdamTile(const math::AdamScalars& s, const float* g, float* p, float* m,
              float* v, size_t n, float* w);
// AdamTile / SgdTile reading the gradients as stored (fp32, bf16 or fp16),
// widened in registers: bitwise AdamTile / SgdTile over their fp32 values.
void AdamTileRaw(const math::AdamScalars& s, const void* g, DType gt, float* p, float* m,
                 float* v, size_t n, float* w);
// Adam over the bf16 moments format's packed words (exp_avg low half,
// exp_avg_sq high half), widened and rounded in registers: bitwise
// math::AdamUpdateBf16 per element.
void AdamTileBf16Moments(const math::AdamScalars& s, const float* g, float* p, uint32_t* mv,
                         size_t n);
void SgdTileRaw(const math::SgdScalars& s, const void* g, DType gt, float* p, float* buf,
                size_t n, float* w);
void SgdTile(const math::SgdScalars& s, const float* g, float* p, float* buf,
             size_t n, float* w);
// dst[i] = FloatToBf16(src[i]), bitwise as kernels/cast_math.h.
void ToBf16Tile(const float* src, uint16_t* dst, size_t n);
// dst[i] = FloatToHalf(src[i]), bitwise as kernels/cast_math.h.
void ToF16Tile(const float* src, uint16_t* dst, size_t n);
// Name of the instruction set the dispatcher picked (e.g. "AVX3").
const char* SimdTargetName();

}  // namespace cpu
}  // namespace zero

#endif  // ZERO_KERNELS_CPU_OPTIM_SIMD_H_
