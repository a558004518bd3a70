// Adam's moments stored narrower than fp32 (docs/ARCHITECTURE.md, "Optimizer
// state formats"): each step decodes them to fp32, runs math::AdamUpdate, and
// encodes them again. One definition for the CPU and CUDA kernels.
//
//   bf16  each element's (exp_avg, exp_avg_sq) as two bf16 halves of one
//         32-bit word, rounded to nearest even: 4 bytes per element.
//   q8    blocks of kQ8Block elements: one 8-bit code per moment per
//         element on a dynamic (log-spaced, as bitsandbytes' 8-bit Adam)
//         map, times the block's fp32 absmax: 2 + 8/kQ8Block bytes per
//         element. kQ8Block is the layout's shard alignment, so a block never
//         straddles two ranks and sits at the same group offset whatever the
//         world size.
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

// The dynamic maps, ascending: magnitudes of exp_avg's signed map (mag[0]
// = 0, then decades 1e-6..1 holding 1, 2, 4, ..., 64 linear points each, the
// last exactly 1), and exp_avg_sq's unsigned map (0, then decades 1e-7..1
// holding 1, 2, ..., 128 points). Passed by value to CUDA kernels.
struct Q8Maps {
  float mag[128];
  float uns[256];
};

// Magnitude k (1 <= k < 2^decades) of a map with `decades` decades: decade
// i = floor(log2 k) spans (0.1, 1] * 10^(i - decades + 1) in 2^i steps.
inline double Q8MapValue(int k, int decades) {
  int i = 0;
  while ((2 << i) <= k) ++i;
  const int j = k - (1 << i);
  return pow(10.0, i - decades + 1) * (0.1 + 0.9 * (j + 1) / (double)(1 << i));
}

inline Q8Maps MakeQ8Maps() {
  Q8Maps q;
  q.mag[0] = 0.0f;
  q.uns[0] = 0.0f;
  for (int k = 1; k < 128; ++k) q.mag[k] = (float)Q8MapValue(k, 7);
  for (int k = 1; k < 256; ++k) q.uns[k] = (float)Q8MapValue(k, 8);
  return q;
}

// Index of the entry of ascending `t` (n entries, t[0] = 0) nearest to
// a >= 0; ties to the lower entry.
ZERO_HD int Q8Nearest(const float* t, int n, float a) {
  int lo = 0;
  for (int step = n >> 1; step > 0; step >>= 1) {
    if (lo + step < n && t[lo + step] <= a) lo += step;
  }
  if (lo + 1 < n && t[lo + 1] - a < a - t[lo]) ++lo;
  return lo;
}

// exp_avg's code: 128 + k for +mag[k], 128 - k for -mag[k].
ZERO_HD uint8_t Q8EncodeSigned(const Q8Maps& q, float x, float absmax) {
  const float a = absmax > 0.0f ? fabsf(x) / absmax : 0.0f;
  const int k = Q8Nearest(q.mag, 128, a);
  return (uint8_t)(x < 0.0f ? 128 - k : 128 + k);
}
ZERO_HD float Q8DecodeSigned(const Q8Maps& q, uint8_t c, float absmax) {
  const float mag = c >= 128 ? q.mag[c - 128] : q.mag[c == 0 ? 127 : 128 - c];
  return (c >= 128 ? mag : -mag) * absmax;
}
ZERO_HD uint8_t Q8EncodeUnsigned(const Q8Maps& q, float x, float absmax) {
  return (uint8_t)Q8Nearest(q.uns, 256, absmax > 0.0f ? x / absmax : 0.0f);
}
ZERO_HD float Q8DecodeUnsigned(const Q8Maps& q, uint8_t c, float absmax) {
  return q.uns[c] * absmax;
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
ZERO_HD void AdamUpdateQ8Block(const AdamScalars& s, const Q8Maps& q, const float* g,
                               float* p, Q8Block* b, int n) {
  float m[kQ8Block], v[kQ8Block];
  float m_max = 0.0f, v_max = 0.0f;
  for (int i = 0; i < n; ++i) {
    m[i] = Q8DecodeSigned(q, b->m[i], b->m_absmax);
    v[i] = Q8DecodeUnsigned(q, b->v[i], b->v_absmax);
    AdamUpdate(s, g[i], p + i, m + i, v + i);
    m_max = fmaxf(m_max, fabsf(m[i]));
    v_max = fmaxf(v_max, v[i]);
  }
  b->m_absmax = m_max;
  b->v_absmax = v_max;
  for (int i = 0; i < n; ++i) {
    b->m[i] = Q8EncodeSigned(q, m[i], m_max);
    b->v[i] = Q8EncodeUnsigned(q, v[i], v_max);
  }
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_MOMENTS_FORMAT_MATH_H_
