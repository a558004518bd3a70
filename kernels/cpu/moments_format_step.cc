#include "kernels/cpu/moments_format_step.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/optim_simd.h"
#include "kernels/cpu/widen_simd.h"
#include "kernels/moments_format_math.h"

namespace zero {
namespace cpu {
namespace {

// Elements per tile, whole q8 blocks: the gradient's widening, the update
// and the working copy's cast of one tile stay in L1/L2.
constexpr int64_t kTile = 4096;
static_assert(kTile % math::kQ8Block == 0, "tiles hold whole blocks");
constexpr int64_t kParallelMin = 1 << 15;

const math::Q8Maps& Maps() {
  static const math::Q8Maps maps = math::MakeQ8Maps();
  return maps;
}

// math::Q8Nearest without the binary search: a's top 17 bits (a in [0, 1])
// index the largest entry <= the bucket's lowest value; the map's entries
// lie more than a bucket (2^-8 relative) apart, so at most the next one is
// also <= a. Then the same nearest test: bitwise Q8Nearest.
class Q8Encoder {
 public:
  Q8Encoder(const float* t, int n) : t_(t), n_(n), first_(kBuckets) {
    for (uint32_t k = 0; k < kBuckets; ++k) {
      first_[k] = static_cast<uint8_t>(Below(math::BitsFloat(k << 15)));
    }
  }
  int Encode(float a) const {
    if (!(a <= 1.0f)) return math::Q8Nearest(t_, n_, a);  // NaN
    int lo = first_[math::FloatBits(a) >> 15];
    if (lo + 1 < n_ && t_[lo + 1] <= a) ++lo;
    if (lo + 1 < n_ && t_[lo + 1] - a < a - t_[lo]) ++lo;
    return lo;
  }

 private:
  static constexpr uint32_t kBuckets = (0x3f800000u >> 15) + 1;
  int Below(float a) const {
    int lo = 0;
    while (lo + 1 < n_ && t_[lo + 1] <= a) ++lo;
    return lo;
  }
  const float* t_;
  int n_;
  std::vector<uint8_t> first_;
};

const Q8Encoder& SignedEncoder() {
  static const Q8Encoder e(Maps().mag, 128);
  return e;
}
const Q8Encoder& UnsignedEncoder() {
  static const Q8Encoder e(Maps().uns, 256);
  return e;
}

// Adam over the whole q8 blocks of one tile: decoded into fp32 tiles, the
// SIMD Adam tile, each block's absmax, encoded: bitwise
// math::AdamUpdateQ8Block.
void AdamQ8Tile(const math::AdamScalars& s, const float* g, float* p, math::Q8Block* blocks,
                int64_t len) {
  const math::Q8Maps& q = Maps();
  alignas(64) float mt[kTile], vt[kTile];
  for (int64_t i = 0; i < len; ++i) {
    const math::Q8Block& b = blocks[i / math::kQ8Block];
    const int64_t k = i % math::kQ8Block;
    mt[i] = math::Q8DecodeSigned(q, b.m[k], b.m_absmax);
    vt[i] = math::Q8DecodeUnsigned(q, b.v[k], b.v_absmax);
  }
  AdamTile(s, g, p, mt, vt, static_cast<size_t>(len), nullptr);
  const Q8Encoder& se = SignedEncoder();
  const Q8Encoder& ue = UnsignedEncoder();
  for (int64_t a = 0; a < len; a += math::kQ8Block) {
    math::Q8Block& b = blocks[a / math::kQ8Block];
    const int64_t n = std::min<int64_t>(math::kQ8Block, len - a);
    float m_max = 0.0f, v_max = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      m_max = std::max(m_max, std::fabs(mt[a + i]));  // fmaxf for these values, inline
      v_max = std::max(v_max, vt[a + i]);
    }
    b.m_absmax = m_max;
    b.v_absmax = v_max;
    for (int64_t i = 0; i < n; ++i) {
      const float x = mt[a + i];
      const int k = se.Encode(m_max > 0.0f ? fabsf(x) / m_max : 0.0f);
      b.m[i] = static_cast<uint8_t>(x < 0.0f ? 128 - k : 128 + k);
      b.v[i] = static_cast<uint8_t>(ue.Encode(v_max > 0.0f ? vt[a + i] / v_max : 0.0f));
    }
  }
}

// Tile [a, a+len) of gradient g (dtype gt) as fp32.
const float* GradTile(const void* g, DType gt, int64_t a, int64_t len, float* tile) {
  switch (gt) {
    case DType::kF32: return static_cast<const float*>(g) + a;
    case DType::kF16:
      F16ToF32Tile(static_cast<const uint16_t*>(g) + a, tile, static_cast<size_t>(len), 1.0f);
      break;
    case DType::kBF16:
      Bf16ToF32Tile(static_cast<const uint16_t*>(g) + a, tile, static_cast<size_t>(len), 1.0f);
      break;
  }
  return tile;
}

void StoreWork(const float* p, void* work, DType t, int64_t a, int64_t len) {
  const size_t n = static_cast<size_t>(len);
  switch (t) {
    case DType::kF32: std::memcpy(static_cast<float*>(work) + a, p, n * sizeof(float)); break;
    case DType::kF16: ToF16Tile(p, static_cast<uint16_t*>(work) + a, n); break;
    case DType::kBF16: ToBf16Tile(p, static_cast<uint16_t*>(work) + a, n); break;
  }
}

}  // namespace

void AdamPackedStep(const math::AdamScalars& s, int format, const void* g, DType gt, float* p,
                    void* moments, int64_t n, void* work, DType work_dtype, bool zero_grad,
                    int threads) {
  const int64_t tiles = (n + kTile - 1) / kTile;
  const size_t ges = DTypeSize(gt);
#pragma omp parallel for schedule(static) num_threads(threads) if (n >= kParallelMin)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t a = t * kTile;
    const int64_t len = std::min(kTile, n - a);
    alignas(64) float tile[kTile];
    const float* gf = GradTile(g, gt, a, len, tile);
    if (format == math::kMomentsBf16) {
      // Unpacked into fp32 tiles, the SIMD Adam tile (bitwise
      // math::AdamUpdate), packed back rounding as FloatToBf16: bitwise
      // math::AdamUpdateBf16, at the fp32 kernel's speed.
      uint32_t* mv = static_cast<uint32_t*>(moments) + a;
      alignas(64) float mt[kTile], vt[kTile];
      alignas(64) uint16_t m16[kTile], v16[kTile];
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) {
        mt[i] = math::BitsFloat(mv[i] << 16);
        vt[i] = math::BitsFloat(mv[i] & 0xffff0000u);
      }
      AdamTile(s, gf, p + a, mt, vt, static_cast<size_t>(len), nullptr);
      ToBf16Tile(mt, m16, static_cast<size_t>(len));
      ToBf16Tile(vt, v16, static_cast<size_t>(len));
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) {
        mv[i] = static_cast<uint32_t>(m16[i]) | (static_cast<uint32_t>(v16[i]) << 16);
      }
    } else {
      AdamQ8Tile(s, gf, p + a, static_cast<math::Q8Block*>(moments) + a / math::kQ8Block, len);
    }
    if (work != nullptr) StoreWork(p + a, work, work_dtype, a, len);
    if (zero_grad) std::memset(static_cast<char*>(const_cast<void*>(g)) + a * ges, 0, len * ges);
  }
}

void PackMoments(int format, const float* m, const float* v, void* moments, int64_t n) {
  if (format == math::kMomentsBf16) {
    auto* mv = static_cast<uint32_t*>(moments);
    for (int64_t i = 0; i < n; ++i) {
      mv[i] = static_cast<uint32_t>(math::FloatToBf16(m[i])) |
              (static_cast<uint32_t>(math::FloatToBf16(v[i])) << 16);
    }
    return;
  }
  const math::Q8Maps& q = Maps();
  auto* blocks = static_cast<math::Q8Block*>(moments);
  for (int64_t a = 0; a < n; a += math::kQ8Block) {
    math::Q8Block& b = blocks[a / math::kQ8Block];
    std::memset(&b, 0, sizeof(b));
    const int64_t len = std::min<int64_t>(math::kQ8Block, n - a);
    for (int64_t i = 0; i < len; ++i) {
      b.m_absmax = std::max(b.m_absmax, std::fabs(m[a + i]));
      b.v_absmax = std::max(b.v_absmax, v[a + i]);
    }
    for (int64_t i = 0; i < len; ++i) {
      b.m[i] = math::Q8EncodeSigned(q, m[a + i], b.m_absmax);
      b.v[i] = math::Q8EncodeUnsigned(q, v[a + i], b.v_absmax);
    }
  }
}

void UnpackMoments(int format, const void* moments, float* m, float* v, int64_t n) {
  if (format == math::kMomentsBf16) {
    const auto* mv = static_cast<const uint32_t*>(moments);
    for (int64_t i = 0; i < n; ++i) {
      if (m) m[i] = math::Bf16ToFloat(static_cast<uint16_t>(mv[i] & 0xffffu));
      if (v) v[i] = math::Bf16ToFloat(static_cast<uint16_t>(mv[i] >> 16));
    }
    return;
  }
  const math::Q8Maps& q = Maps();
  const auto* blocks = static_cast<const math::Q8Block*>(moments);
  for (int64_t i = 0; i < n; ++i) {
    const math::Q8Block& b = blocks[i / math::kQ8Block];
    const int64_t k = i % math::kQ8Block;
    if (m) m[i] = math::Q8DecodeSigned(q, b.m[k], b.m_absmax);
    if (v) v[i] = math::Q8DecodeUnsigned(q, b.v[k], b.v_absmax);
  }
}

}  // namespace cpu
}  // namespace zero
