// Block-wise int8/int4 quantization of fp32 pieces (kernels/quant_math.h
// defines the arithmetic and the packed layout). Highway SIMD with dynamic
// dispatch; bitwise equal to the scalar bodies in quant_math.h and to the
// CUDA kernels (kernels/cuda/quant.cu), which run the same operations.
#ifndef ZERO_KERNELS_CPU_QUANT_SIMD_H_
#define ZERO_KERNELS_CPU_QUANT_SIMD_H_

#include <cstdint>

#include "kernels/quant_math.h"

namespace zero {
namespace cpu {

// Largest block the kernels take (a block's codes sit in a stack buffer).
constexpr int kMaxQuantBlock = 4096;

// Packs x[0, n) into `out` (math::QuantPackedBytes(n, bits, block) bytes;
// padding bytes are zeroed). bits: 8 or 4; block in [1, kMaxQuantBlock].
void QuantizePiece(const float* x, int64_t n, int bits, int block, uint8_t* out);
// out[i] = code_i * scale_of_its_block.
void DequantizePiece(const uint8_t* in, int64_t n, int bits, int block, float* out);
// acc[i] = acc[i] + code_i * scale (fp32 accumulation of a received piece).
void DequantizeAdd(const uint8_t* in, int64_t n, int bits, int block, float* acc);

}  // namespace cpu
}  // namespace zero

#endif  // ZERO_KERNELS_CPU_QUANT_SIMD_H_
