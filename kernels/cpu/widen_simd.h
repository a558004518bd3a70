// Highway (SIMD) loops that read gradients: fp16 / bf16 widened to fp32,
// and the sum of squares in double in a fixed accumulator layout, so the
// result does not depend on the instruction set or the thread count
// (cpu_kernels.cc splits into blocks and threads).
#ifndef ZERO_KERNELS_CPU_WIDEN_SIMD_H_
#define ZERO_KERNELS_CPU_WIDEN_SIMD_H_

#include <cstddef>
#include <cstdint>

namespace zero {
namespace cpu {

// dst[i] = HalfToFloat(src[i]) * scale, bitwise as kernels/cast_math.h
// (subnormals, inf and NaN payloads included).
void F16ToF32Tile(const uint16_t* src, float* dst, size_t n, float scale);
// dst[i] = Bf16ToFloat(src[i]) * scale.
void Bf16ToF32Tile(const uint16_t* src, float* dst, size_t n, float scale);
// dst[i] = src[i] * scale (dst may be src).
void ScaleF32Tile(const float* src, float* dst, size_t n, float scale);

// Accumulators of the sum of squares: element k of a block goes to
// acc[k % kSquareLanes], added in increasing k, each term
// (double)x * (double)x (math::SquaredTerm).
constexpr int kSquareLanes = 32;
// acc[k % kSquareLanes] += SquaredTerm(x[k]) for k < n (x[0] at a block
// position that is a multiple of kSquareLanes).
void AccumulateSquares(const float* x, size_t n, double* acc);

}  // namespace cpu
}  // namespace zero

#endif  // ZERO_KERNELS_CPU_WIDEN_SIMD_H_
