#include "kernels/cpu/cpu_kernels.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/cast_math.h"
#include "kernels/cpu/adagrad_simd.h"
#include "kernels/cpu/lion_simd.h"
#include "kernels/cpu/moments_format_step.h"
#include "kernels/cpu/optim_simd.h"
#include "kernels/cpu/widen_simd.h"
#include "kernels/norm_math.h"

namespace zero {
namespace cpu {
namespace {

// Below this many elements threads cost more than they save.
constexpr int64_t kParallelMin = 1 << 15;

// Set by SetThreads for every calling thread alike (omp_set_num_threads
// would reach only the thread that calls it, not the comm thread).
std::atomic<int> g_threads{0};
inline int Threads() {
  const int t = g_threads.load(std::memory_order_relaxed);
  return t > 0 ? t : omp_get_max_threads();
}

// Elements per tile: the update and the cast to the working dtype of one tile
// happen while it is in L1/L2 (one pass over memory).
constexpr int64_t kTile = 4096;

template <typename Update>
void Tiled(int64_t n, void* work, DType work_dtype, float* p, Update update) {
  const int64_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) num_threads(Threads()) if (n >= kParallelMin)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t a = t * kTile;
    const int64_t len = std::min(kTile, n - a);
    float* w32 = work && work_dtype == DType::kF32 ? static_cast<float*>(work) + a : nullptr;
    update(a, len, w32);
    if (work == nullptr || work_dtype == DType::kF32) continue;
    if (work_dtype == DType::kBF16) {
      ToBf16Tile(p + a, static_cast<uint16_t*>(work) + a, static_cast<size_t>(len));
    } else {
      ToF16Tile(p + a, static_cast<uint16_t*>(work) + a, static_cast<size_t>(len));
    }
  }
}

// Tile [a, a+len) of x (dtype t) as fp32, times `scale`: in place for fp32
// at scale 1, else widened into `tile` (kTile floats). The dtype switch is
// per tile, the loops are SIMD (widen_simd.h). NaNs stay NaN (a scale of 1
// is not applied, so a signalling NaN is not quieted).
inline const float* F32Tile(const void* x, DType t, int64_t a, int64_t len, float* tile,
                            float scale = 1.0f) {
  switch (t) {
    case DType::kF32:
      if (scale == 1.0f) return static_cast<const float*>(x) + a;
      ScaleF32Tile(static_cast<const float*>(x) + a, tile, static_cast<size_t>(len), scale);
      break;
    case DType::kF16:
      F16ToF32Tile(static_cast<const uint16_t*>(x) + a, tile, static_cast<size_t>(len), scale);
      break;
    case DType::kBF16:
      Bf16ToF32Tile(static_cast<const uint16_t*>(x) + a, tile, static_cast<size_t>(len), scale);
      break;
  }
  return tile;
}

// Stores fp32 `src` as dtype t at x + a.
inline void StoreTile(const float* src, void* x, DType t, int64_t a, int64_t len) {
  switch (t) {
    case DType::kF32:
      if (static_cast<float*>(x) + a != src) {
        std::memcpy(static_cast<float*>(x) + a, src, len * sizeof(float));
      }
      break;
    case DType::kF16:
      ToF16Tile(src, static_cast<uint16_t*>(x) + a, static_cast<size_t>(len));
      break;
    case DType::kBF16:
      ToBf16Tile(src, static_cast<uint16_t*>(x) + a, static_cast<size_t>(len));
      break;
  }
}

inline int64_t Tiles(int64_t n) { return (n + kTile - 1) / kTile; }

// Elements per block of the sum of squares: each block's partial sum is the
// same whatever the thread count (blocks are summed in order).
constexpr int64_t kSquareBlock = 1 << 15;

double SquaresBlock(const void* x, DType t, int64_t a, int64_t len) {
  alignas(64) double acc[kSquareLanes] = {};
  alignas(64) float tile[kTile];
  for (int64_t b = a; b < a + len; b += kTile) {
    const int64_t m = std::min(kTile, a + len - b);
    AccumulateSquares(F32Tile(x, t, b, m, tile), static_cast<size_t>(m), acc);
  }
  double s = 0.0;
  for (double v : acc) s += v;
  return s;
}

}  // namespace

void SetThreads(int n) { g_threads = n; }

void AdamStep(const math::AdamScalars& s, const float* g, float* p, float* m,
              float* v, int64_t n, void* work, DType work_dtype) {
  Tiled(n, work, work_dtype, p, [&](int64_t a, int64_t len, float* w32) {
    AdamTile(s, g + a, p + a, m + a, v + a, static_cast<size_t>(len), w32);
  });
}

void SgdStep(const math::SgdScalars& s, const float* g, float* p, float* buf,
             int64_t n, void* work, DType work_dtype) {
  Tiled(n, work, work_dtype, p, [&](int64_t a, int64_t len, float* w32) {
    SgdTile(s, g + a, p + a, buf ? buf + a : nullptr, static_cast<size_t>(len), w32);
  });
}

void AdamStepRawGrad(const math::AdamScalars& s, void* g, DType gt, float* p,
                     float* m, float* v, int64_t n, void* work, DType work_dtype,
                     bool zero_grad) {
  const size_t ges = DTypeSize(gt);
  Tiled(n, work, work_dtype, p, [&](int64_t a, int64_t len, float* w32) {
    AdamTileRaw(s, static_cast<const char*>(g) + a * ges, gt, p + a, m + a, v + a,
                static_cast<size_t>(len), w32);
    if (zero_grad) std::memset(static_cast<char*>(g) + a * ges, 0, len * ges);
  });
}

void SgdStepRawGrad(const math::SgdScalars& s, void* g, DType gt, float* p,
                    float* buf, int64_t n, void* work, DType work_dtype,
                    bool zero_grad) {
  const size_t ges = DTypeSize(gt);
  Tiled(n, work, work_dtype, p, [&](int64_t a, int64_t len, float* w32) {
    SgdTileRaw(s, static_cast<const char*>(g) + a * ges, gt, p + a, buf ? buf + a : nullptr,
               static_cast<size_t>(len), w32);
    if (zero_grad) std::memset(static_cast<char*>(g) + a * ges, 0, len * ges);
  });
}

void OptimizerStep(const math::OptimScalars& s, void* g, DType gt, float* p, float* s1,
                   float* s2, int64_t n, void* work, DType work_dtype, bool zero_grad) {
  if (s.kind == math::kOptimAdam && s.moments_format != math::kMomentsF32) {
    AdamPackedStep(s.adam, s.moments_format, g, gt, p, s1, n, work, work_dtype, zero_grad,
                   Threads());
    return;
  }
  const size_t ges = DTypeSize(gt);
  Tiled(n, work, work_dtype, p, [&](int64_t a, int64_t len, float* w32) {
    const char* ga = static_cast<const char*>(g) + a * ges;
    const size_t l = static_cast<size_t>(len);
    switch (s.kind) {
      case math::kOptimAdam: AdamTileRaw(s.adam, ga, gt, p + a, s1 + a, s2 + a, l, w32); break;
      case math::kOptimSgd: SgdTileRaw(s.sgd, ga, gt, p + a, s1 ? s1 + a : nullptr, l, w32); break;
      case math::kOptimLion: LionTileRaw(s.lion, ga, gt, p + a, s1 + a, l, w32); break;
      case math::kOptimAdagrad: AdagradTileRaw(s.adagrad, ga, gt, p + a, s1 + a, l, w32); break;
    }
    if (zero_grad) std::memset(static_cast<char*>(g) + a * ges, 0, len * ges);
  });
}

void ToF32(const void* src, DType t, float* dst, int64_t n, float scale) {
  if (t == DType::kF32 && scale == 1.0f && src == dst) return;
#pragma omp parallel for schedule(static) num_threads(Threads()) if (n >= kParallelMin)
  for (int64_t k = 0; k < Tiles(n); ++k) {
    const int64_t a = k * kTile;
    const int64_t len = std::min(kTile, n - a);
    alignas(64) float tile[kTile];
    StoreTile(F32Tile(src, t, a, len, tile, scale), dst, DType::kF32, a, len);
  }
}

void FromF32(const float* src, void* dst, DType t, int64_t n) {
#pragma omp parallel for schedule(static) num_threads(Threads()) if (n >= kParallelMin)
  for (int64_t k = 0; k < Tiles(n); ++k) {
    const int64_t a = k * kTile;
    StoreTile(src + a, dst, t, a, std::min(kTile, n - a));
  }
}

void Accumulate(void* dst, const void* src, DType t, int64_t n) {
#pragma omp parallel for schedule(static) num_threads(Threads()) if (n >= kParallelMin)
  for (int64_t k = 0; k < Tiles(n); ++k) {
    const int64_t a = k * kTile;
    const int64_t len = std::min(kTile, n - a);
    alignas(64) float dt[kTile], st[kTile], sum[kTile];
    const float* x = F32Tile(dst, t, a, len, dt);
    const float* y = F32Tile(src, t, a, len, st);
    for (int64_t i = 0; i < len; ++i) sum[i] = x[i] + y[i];
    StoreTile(sum, dst, t, a, len);
  }
}

void AccumulateF32(void* dst, const float* src, float scale, DType t,
                   int64_t n) {
#pragma omp parallel for schedule(static) num_threads(Threads()) if (n >= kParallelMin)
  for (int64_t k = 0; k < Tiles(n); ++k) {
    const int64_t a = k * kTile;
    const int64_t len = std::min(kTile, n - a);
    alignas(64) float dt[kTile], sum[kTile];
    const float* x = F32Tile(dst, t, a, len, dt);
    const float* y = src + a;
    for (int64_t i = 0; i < len; ++i) sum[i] = x[i] + y[i] * scale;
    StoreTile(sum, dst, t, a, len);
  }
}

namespace {
// SquaresBlock over x[a, a+len) scaled in place first, tile by tile.
double ScaledSquaresBlock(float* x, int64_t a, int64_t len, float scale) {
  alignas(64) double acc[kSquareLanes] = {};
  alignas(64) float tile[kTile];
  for (int64_t b = a; b < a + len; b += kTile) {
    const int64_t m = std::min(kTile, a + len - b);
    const float* t = F32Tile(x, DType::kF32, b, m, tile, scale);
    if (t != x + b) std::memcpy(x + b, t, m * sizeof(float));
    AccumulateSquares(x + b, static_cast<size_t>(m), acc);
  }
  double s = 0.0;
  for (double v : acc) s += v;
  return s;
}
}  // namespace

double ScaleSumSquares(float* x, int64_t n, float scale) {
  const int64_t blocks = (n + kSquareBlock - 1) / kSquareBlock;
  if (blocks <= 1) return n > 0 ? ScaledSquaresBlock(x, 0, n, scale) : 0.0;
  std::vector<double> partial(blocks);
#pragma omp parallel for schedule(static) num_threads(Threads())
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t a = b * kSquareBlock;
    partial[b] = ScaledSquaresBlock(x, a, std::min(kSquareBlock, n - a), scale);
  }
  double s = 0.0;
  for (double p : partial) s += p;
  return s;
}

double SumSquares(const void* x, DType t, int64_t n) {
  const int64_t blocks = (n + kSquareBlock - 1) / kSquareBlock;
  if (blocks <= 1) return n > 0 ? SquaresBlock(x, t, 0, n) : 0.0;
  std::vector<double> partial(blocks);
#pragma omp parallel for schedule(static) num_threads(Threads())
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t a = b * kSquareBlock;
    partial[b] = SquaresBlock(x, t, a, std::min(kSquareBlock, n - a));
  }
  double s = 0.0;
  for (double p : partial) s += p;
  return s;
}

}  // namespace cpu
}  // namespace zero
