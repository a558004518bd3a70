// The 8-bit moments' codes (kernels/moments_format_math.h, q8) decoded and
// encoded with Highway SIMD, dynamic dispatch: bitwise Q8DecodeSigned /
// Q8DecodeUnsigned and the encoding half of math::AdamUpdateQ8Block. The
// codes are minifloats, so both directions are bit arithmetic in the lanes
// (no table loads).
#ifndef ZERO_KERNELS_CPU_Q8_CODEC_SIMD_H_
#define ZERO_KERNELS_CPU_Q8_CODEC_SIMD_H_

#include <cstdint>

#include "kernels/moments_format_math.h"

namespace zero {
namespace cpu {

// Elements [0, len) of the q8 blocks from `blocks` (a block start) as fp32.
void Q8DecodeTile(const math::Q8Block* blocks, int64_t len, float* m, float* v);
// Each block's absmax over its elements of m and v, then their codes:
// elements [0, len) from a block start; codes past len stay as they are.
void Q8EncodeTile(const float* m, const float* v, int64_t len, math::Q8Block* blocks);

}  // namespace cpu
}  // namespace zero

#endif  // ZERO_KERNELS_CPU_Q8_CODEC_SIMD_H_
