#include "kernels/cpu/moments_format_step.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/optim_simd.h"
#include "kernels/cpu/q8_codec_simd.h"
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
      AdamTileBf16Moments(s, gf, p + a, static_cast<uint32_t*>(moments) + a,
                          static_cast<size_t>(len));
    } else {
      AdamTileQ8Moments(s, gf, p + a, static_cast<math::Q8Block*>(moments) + a / math::kQ8Block,
                        len);
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
  // Codes past n in the last block stay zero.
  std::memset(moments, 0, math::PackedMomentsBytes(format, n));
  Q8EncodeTile(m, v, n, static_cast<math::Q8Block*>(moments));
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
  // One tile at a time: m or v may be null.
  alignas(64) float mt[kTile], vt[kTile];
  const auto* blocks = static_cast<const math::Q8Block*>(moments);
  for (int64_t a = 0; a < n; a += kTile) {
    const int64_t len = std::min(kTile, n - a);
    Q8DecodeTile(blocks + a / math::kQ8Block, len, mt, vt);
    if (m) std::memcpy(m + a, mt, len * sizeof(float));
    if (v) std::memcpy(v + a, vt, len * sizeof(float));
  }
}

}  // namespace cpu
}  // namespace zero
