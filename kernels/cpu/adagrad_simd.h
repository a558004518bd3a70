// Highway (SIMD, dynamic dispatch) Adagrad over one contiguous tile, same
// operation order as kernels/adagrad_math.h and no FMA contraction: bitwise
// math::AdagradUpdate. Threads are the caller's business (cpu_kernels.cc).
#ifndef ZERO_KERNELS_CPU_ADAGRAD_SIMD_H_
#define ZERO_KERNELS_CPU_ADAGRAD_SIMD_H_

#include <cstddef>

#include "kernels/adagrad_math.h"
#include "kernels/dtype.h"

namespace zero {
namespace cpu {

// Gradients `g` as stored (dtype gt, widened in registers); `w`, if not
// null, receives the updated p (fp32 working copy).
void AdagradTileRaw(const math::AdagradScalars& s, const void* g, DType gt, float* p,
                    float* v, size_t n, float* w);

}  // namespace cpu
}  // namespace zero

#endif  // ZERO_KERNELS_CPU_ADAGRAD_SIMD_H_
