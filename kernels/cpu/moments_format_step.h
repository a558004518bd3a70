// Adam over packed moments (kernels/moments_format_math.h) on the CPU: the
// step cpu::OptimizerStep takes when OptimScalars::moments_format is not
// fp32. Gradients are read as stored; `work`, if not null, receives the
// updated master cast to `work_dtype` in the same pass.
#ifndef ZERO_KERNELS_CPU_MOMENTS_FORMAT_STEP_H_
#define ZERO_KERNELS_CPU_MOMENTS_FORMAT_STEP_H_

#include <cstdint>

#include "kernels/adam_math.h"
#include "kernels/dtype.h"

namespace zero {
namespace cpu {

// Elements [0, n) of `moments` (format `format`; q8: n counts from a block
// start). Threads over tiles of whole blocks.
void AdamPackedStep(const math::AdamScalars& s, int format, const void* g, DType gt, float* p,
                    void* moments, int64_t n, void* work, DType work_dtype, bool zero_grad,
                    int threads);

// The packed moments of n elements from fp32 m and v, and back: checkpoints
// and read_owned_state see the moments as fp32 (m or v may be null on
// unpack). q8 blocks start at element 0.
void PackMoments(int format, const float* m, const float* v, void* moments, int64_t n);
void UnpackMoments(int format, const void* moments, float* m, float* v, int64_t n);

}  // namespace cpu
}  // namespace zero

#endif  // ZERO_KERNELS_CPU_MOMENTS_FORMAT_STEP_H_
