// Highway (SIMD, dynamic dispatch) Lion over one contiguous tile, same
// operation order as kernels/lion_math.h and no FMA contraction: bitwise
// math::LionUpdate. Threads are the caller's business (cpu_kernels.cc).
#ifndef ZERO_KERNELS_CPU_LION_SIMD_H_
#define ZERO_KERNELS_CPU_LION_SIMD_H_

#include <cstddef>

#include "kernels/dtype.h"
#include "kernels/lion_math.h"

namespace zero {
namespace cpu {

// Gradients `g` as stored (dtype gt, widened in registers); `w`, if not
// null, receives the updated p (fp32 working copy).
void LionTileRaw(const math::LionScalars& s, const void* g, DType gt, float* p, float* m,
                 size_t n, float* w);

}  // namespace cpu
}  // namespace zero

#endif  // ZERO_KERNELS_CPU_LION_SIMD_H_
