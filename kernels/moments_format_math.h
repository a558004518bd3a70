// Adam's moments stored narrower than fp32 (docs/ARCHITECTURE.md, "Optimizer
// state formats"): each step decodes them to fp32, runs math::AdamUpdate, and
// encodes them again. One definition for the CPU and CUDA kernels.
//
//   bf16  each element's (exp_avg, exp_avg_sq) as two bf16 halves of one
//         32-bit word, rounded to nearest even: 4 bytes per element.
//   q8    blocks of kQ8Block elements: one 8-bit code per moment per
//         element, a binary minifloat (log-spaced like bitsandbytes'
//         dynamic map, but bit arithmetic) times the block's fp32
//         absmax: 2 + 8/kQ8Block bytes per element. kQ8Block is the
//         layout's shard alignment, so a block never straddles two ranks
//         and sits at the same group offset whatever the world size.
#ifndef ZERO_KERNELS_MOMENTS_FORMAT_MATH_H_
#define ZERO_KERNELS_MOMENTS_FORMAT_MATH_H_

#include <math.h>
#include <stdint.h>

#include "kernels/adam_math.h"
#include "kernels/cast_math.h"
#include "kernels/hd.h"

namespace zero {
namespace math {

// Fixed values: configs, manifests and kernels switch on them.
enum MomentsFormat { kMomentsF32 = 0, kMomentsBf16 = 1, kMomentsQ8 = 2 };

// Elements per q8 block: core/partition/layout.h's kAlignElems.
constexpr int kQ8Block = 64;

// One q8 block: codes of exp_avg (signed map) and exp_avg_sq (unsigned map),
// then each moment's absmax over the block.
struct Q8Block {
  uint8_t m[kQ8Block];
  uint8_t v[kQ8Block];
  float m_absmax;
  float v_absmax;
};

// Bytes of the packed moments of n elements (the fp32 format keeps two
// arrays of 4n bytes instead).
ZERO_HD long long PackedMomentsBytes(int format, long long n) {
  if (format == kMomentsBf16) return 4 * n;
  return (n + kQ8Block - 1) / kQ8Block * (long long)sizeof(Q8Block);
}
// Byte offset of element `begin` in the packed moments (q8: a block start).
ZERO_HD long long PackedMomentsOffset(int format, long long begin) {
  return format == kMomentsBf16 ? 4 * begin : begin / kQ8Block * (long long)sizeof(Q8Block);
}

// The q8 codes are binary minifloats of the ratio a = |x| * Q8Inverse(absmax)
// in [0, 1], pure bit arithmetic (no tables) so SIMD lanes and CUDA threads
// compute them. A map <Lo, Top, Bits> has E = 1 - Lo - Top and magnitude
// codes k
//   k < 8:              k * 2^(E-3)            (linear steps near 0)
//   8 <= k < 8 Lo:      3 mantissa bits, binades 2^E .. 2^(-Top-1)
//   8 Lo <= k:          Bits mantissa bits, binades 2^-Top .. 2^-1, then 1
// so the top code 8 Lo + Top 2^Bits is exactly 1.0 (a block's absmax decodes
// exactly) and codes above it are never written. exp_avg: sign bit 7 + a
// 7-bit magnitude <15, 0, 3> (E4M3: top code 120, smallest step 2^-17 ~
// 7.6e-6 of the absmax); exp_avg_sq: an 8-bit magnitude <19, 3, 5> (top
// code 248, smallest step 2^-24 ~ 6e-8; 32 values per binade over the top
// 3 binades, where most of a block's v lie and where beta2's small steps
// must not round away).
struct Q8MMap {
  static constexpr int kLo = 15, kTop = 0, kBits = 3;
};
struct Q8VMap {
  static constexpr int kLo = 19, kTop = 3, kBits = 5;
};

// One reciprocal per block; 0 for an all-zero block (every code 0).
ZERO_HD float Q8Inverse(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

// The magnitude code of ratio a (its sign ignored), rounded to the nearest
// value, ties to the even code. a past 1 (|x| * (1/absmax) rounds up) is 1;
// NaN is 0, as the absmax skips it.
template <class Map>
ZERO_HD uint32_t Q8MagCode(float a) {
  const int kLo = Map::kLo, kTop = Map::kTop, kBits = Map::kBits, e = 1 - kLo - kTop;
  uint32_t u = FloatBits(a) & 0x7fffffffu;
  if (u > 0x7f800000u) return 0u;
  if (u > 0x3f800000u) u = 0x3f800000u;
  if (u < (uint32_t)(127 + e) << 23) {
    // Below 2^E: adding 2^(E+20), whose ulp is 2^(E-3), rounds a to the
    // linear steps (IEEE round to nearest even).
    const float magic = BitsFloat((uint32_t)(147 + e) << 23);
    return FloatBits(BitsFloat(u) + magic) - FloatBits(magic);
  }
  // Round the float bits to the region's mantissa bits, ties to even; a
  // carry reaches the exponent (and the next region) as it should.
  if (u < (uint32_t)(127 - kTop) << 23) {
    return ((u + 0x7ffffu + ((u >> 20) & 1u)) >> 20) - 8u * (uint32_t)(126 + e);
  }
  const int shift = 23 - kBits;
  return ((u + ((1u << (shift - 1)) - 1u) + ((u >> shift) & 1u)) >> shift) -
         ((uint32_t)(127 - kTop) << kBits) + 8u * kLo;
}
template <class Map>
ZERO_HD float Q8MagValue(uint32_t k) {
  const int kLo = Map::kLo, kTop = Map::kTop, kBits = Map::kBits, e = 1 - kLo - kTop;
  if (k < 8u) return (float)k * BitsFloat((uint32_t)(124 + e) << 23);
  if (k < 8u * kLo) return BitsFloat((k + 8u * (uint32_t)(126 + e)) << 20);
  return BitsFloat((k - 8u * kLo + ((uint32_t)(127 - kTop) << kBits)) << (23 - kBits));
}

// exp_avg's code: the sign of x in bit 7 (a negative x that rounds to 0
// keeps it: decodes to -0), the magnitude below. inv = Q8Inverse(absmax).
ZERO_HD uint8_t Q8EncodeSigned(float x, float inv) {
  return (uint8_t)(((FloatBits(x) >> 24) & 0x80u) | Q8MagCode<Q8MMap>(x * inv));
}
ZERO_HD float Q8DecodeSigned(uint8_t c, float absmax) {
  // The signed value times the absmax: as SIMD lanes compute it (negating
  // the product instead differs in the sign of the NaN that code 0 times
  // an infinite absmax gives).
  const uint32_t sign = (uint32_t)(c & 0x80u) << 24;
  return BitsFloat(FloatBits(Q8MagValue<Q8MMap>(c & 0x7fu)) | sign) * absmax;
}
ZERO_HD uint8_t Q8EncodeUnsigned(float x, float inv) {
  return (uint8_t)Q8MagCode<Q8VMap>(x * inv);
}
ZERO_HD float Q8DecodeUnsigned(uint8_t c, float absmax) {
  return Q8MagValue<Q8VMap>(c) * absmax;
}

// One element in the bf16 format: `mv` holds exp_avg (low half) and
// exp_avg_sq (high half).
ZERO_HD void AdamUpdateBf16(const AdamScalars& s, float g, float* p, uint32_t* mv) {
  float m = Bf16ToFloat((uint16_t)(*mv & 0xffffu));
  float v = Bf16ToFloat((uint16_t)(*mv >> 16));
  AdamUpdate(s, g, p, &m, &v);
  *mv = (uint32_t)FloatToBf16(m) | ((uint32_t)FloatToBf16(v) << 16);
}

// Elements [0, n) (n <= kQ8Block) of one q8 block, g their fp32 gradients
// (raw, as AdamUpdate takes them): decode, update, re-encode against the
// updated moments' absmax. Elements n.. of a short block stay zero.
ZERO_HD void AdamUpdateQ8Block(const AdamScalars& s, const float* g, float* p, Q8Block* b,
                               int n) {
  float m[kQ8Block], v[kQ8Block];
  float m_max = 0.0f, v_max = 0.0f;
  for (int i = 0; i < n; ++i) {
    m[i] = Q8DecodeSigned(b->m[i], b->m_absmax);
    v[i] = Q8DecodeUnsigned(b->v[i], b->v_absmax);
    AdamUpdate(s, g[i], p + i, m + i, v + i);
    m_max = fmaxf(m_max, fabsf(m[i]));
    v_max = fmaxf(v_max, v[i]);
  }
  b->m_absmax = m_max;
  b->v_absmax = v_max;
  const float m_inv = Q8Inverse(m_max), v_inv = Q8Inverse(v_max);
  for (int i = 0; i < n; ++i) {
    b->m[i] = Q8EncodeSigned(m[i], m_inv);
    b->v[i] = Q8EncodeUnsigned(v[i], v_inv);
  }
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_MOMENTS_FORMAT_MATH_H_
