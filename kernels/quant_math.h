// Block-wise symmetric quantization for the quantized collectives (ZeRO++
// qwZ: int8 weights; qgZ: int8/int4 gradients; docs/ARCHITECTURE.md,
// "Quantized collectives"). The arithmetic lives here once, as ZERO_HD
// functions: the CPU kernels (kernels/cpu/quant_simd.cc, Highway) and the
// CUDA kernels (kernels/cuda/quant.cu) compute exactly these operations in
// this order, so both give the same bits; //tests:quant_test checks the SIMD
// kernels against these bodies.
//
// A piece of n values is cut into blocks of `block` values (the last may be
// shorter). Per block: scale = absmax / qmax (qmax 127 for int8, 7 for
// int4), q = clamp(rint(x / scale), -qmax, qmax), x' = q * scale. So
// |x - x'| <= scale / 2 (plus the division's half ulp). A block of zeros has
// scale 0 and q 0. A block holding inf or NaN gets a NaN scale, so every
// value of it dequantizes to NaN: a non-finite gradient stays non-finite
// after the hop and the step is skipped as without quantization (never
// silently turned into finite numbers).
//
// Packed layout of a piece (QuantPackedBytes): nb fp32 scales, then the
// codes: int8 one per byte; int4 two per byte, element 2i in the low nibble
// (two's complement nibbles); padded to a multiple of 4 bytes so pieces put
// back to back keep their scales aligned.
#ifndef ZERO_KERNELS_QUANT_MATH_H_
#define ZERO_KERNELS_QUANT_MATH_H_

#include <math.h>
#include <stdint.h>

#include "kernels/hd.h"

namespace zero {
namespace math {

ZERO_HD float QuantMax(int bits) { return bits == 8 ? 127.0f : 7.0f; }

ZERO_HD int64_t QuantBlocks(int64_t n, int block) { return (n + block - 1) / block; }

ZERO_HD int64_t QuantCodeBytes(int64_t n, int bits) { return bits == 8 ? n : (n + 1) / 2; }

// Bytes of a packed piece of n values (scales, codes, padding to 4).
ZERO_HD int64_t QuantPackedBytes(int64_t n, int bits, int block) {
  const int64_t raw = QuantBlocks(n, block) * 4 + QuantCodeBytes(n, bits);
  return (raw + 3) / 4 * 4;
}

// |x| is finite: compared so that NaN is not.
ZERO_HD bool QuantFinite(float a) { return a <= 3.402823466e38f; }

// The block's scale from its largest |x| (`finite`: no inf/NaN in it).
ZERO_HD float QuantScale(float absmax, bool finite, float qmax) {
  if (!finite) return nanf("");
  return absmax / qmax;
}

// The code of x: rint(x / scale) clamped to [-qmax, qmax]; 0 for a zero or
// NaN scale (the NaN scale alone carries the block's non-finiteness).
ZERO_HD float QuantCode(float x, float scale, float qmax) {
  if (!(scale > 0.0f)) return 0.0f;
  float q = rintf(x / scale);
  q = q > qmax ? qmax : q;
  q = q < -qmax ? -qmax : q;
  return q;
}

ZERO_HD float Dequant(float q, float scale) { return q * scale; }

// int4 nibble <-> code.
ZERO_HD uint8_t Int4Nibble(int q) { return static_cast<uint8_t>(q & 0xF); }
ZERO_HD int Int4FromNibble(uint8_t b) { return (b & 0x8) ? static_cast<int>(b & 0xF) - 16 : b & 0xF; }

// Scalar reference of a whole block (the CPU tail and the test's oracle).
ZERO_HD float QuantizeBlockScalar(const float* x, int64_t n, float qmax, float* codes) {
  float absmax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    finite = finite && QuantFinite(a);
    absmax = a > absmax ? a : absmax;
  }
  const float scale = QuantScale(absmax, finite, qmax);
  for (int64_t i = 0; i < n; ++i) codes[i] = QuantCode(x[i], scale, qmax);
  return scale;
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_QUANT_MATH_H_
