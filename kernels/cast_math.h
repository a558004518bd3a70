// fp32 <-> fp16 / bf16 conversions with round-to-nearest-even, bit-exact on
// host and device (no dependence on the compiler's half type).
#ifndef ZERO_KERNELS_CAST_MATH_H_
#define ZERO_KERNELS_CAST_MATH_H_

#include <stdint.h>
#include <string.h>

#include "kernels/hd.h"

namespace zero {
namespace math {

ZERO_HD uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

ZERO_HD float BitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// bf16 keeps the top 16 bits; round to nearest even, NaN stays (quiet) NaN.
ZERO_HD uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return (uint16_t)(u >> 16);
}

ZERO_HD float Bf16ToFloat(uint16_t h) { return BitsFloat((uint32_t)h << 16); }

// IEEE binary16, round to nearest even; overflow -> inf; subnormals kept.
ZERO_HD uint16_t FloatToHalf(float f) {
  uint32_t u = FloatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // >= 65520: inf
  if (abs < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    if (abs < 0x33000000u) return (uint16_t)sign;  // < 2^-25 rounds to 0
    // value = mant * 2^(exp-150); the half subnormal unit is 2^-24, so the
    // quotient is mant >> (126 - exp), with 14 <= 126 - exp <= 24 here.
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t drop = 126u - exp;
    uint32_t q = mant >> drop;
    uint32_t rem = mant & ((1u << drop) - 1u);
    uint32_t half = 1u << (drop - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return (uint16_t)(sign | q);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return (uint16_t)(sign | h);
}

ZERO_HD float HalfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return BitsFloat(sign);
    // Subnormal: mant * 2^-24, exact in fp32.
    float v = (float)mant * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_CAST_MATH_H_
