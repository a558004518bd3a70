// The 8-bit moments' codes (kernels/moments_format_math.h, q8) decoded and
// encoded with Highway SIMD, dynamic dispatch: bitwise Q8DecodeSigned /
// Q8DecodeUnsigned and the encoding half of math::AdamUpdateQ8Block.
//
// Decoding reads 256-entry fp32 tables (scalar loads: AVX2 gathers measured
// slower on the CPU of bench/README.md). Encoding: Q8Nearest is a
// monotone step function of a in [0, 1], so it is the count of its step
// points (each the smallest float that reaches the next code, found once by
// bisection over float bits with Q8Nearest itself). Indexed by a's top 17
// bits, one int32 per bucket holds the code at the bucket's start and the
// low 15 bits of the one step point inside it (the maps' entries lie far
// enough apart that no bucket holds two): one table load and one compare
// per moment, the rest in SIMD lanes. Lanes outside [0, 1] (NaN) take the scalar math.
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
// Whether the bucket tables hold (at most one step point per bucket); when
// not, encoding takes the scalar math (same bits, slower).
bool Q8EncoderTablesHold();

}  // namespace cpu
}  // namespace zero

#endif  // ZERO_KERNELS_CPU_Q8_CODEC_SIMD_H_
