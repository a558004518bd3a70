// The 8-bit moments' codes (kernels/moments_format_math.h, q8) decoded and
// encoded with Highway SIMD, dynamic dispatch: bitwise Q8DecodeSigned /
// Q8DecodeUnsigned and the encoding half of math::AdamUpdateQ8Block. The
// codes are minifloats, so both directions are bit arithmetic in the lanes
// (no table loads; decoding converts binary16 lanes).
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
// Adam over elements [0, len) of the q8 blocks from `blocks` (a block
// start), g fp32: each block decoded, updated (the Adam of
// kernels/cpu/adam_vec-inl.h) and encoded in one pass over registers and an
// L1 copy of its 64 moments, encoded while the next block is updated:
// bitwise math::AdamUpdateQ8Block.
void AdamTileQ8Moments(const math::AdamScalars& s, const float* g, float* p,
                       math::Q8Block* blocks, int64_t len);

}  // namespace cpu
}  // namespace zero

#endif  // ZERO_KERNELS_CPU_Q8_CODEC_SIMD_H_
