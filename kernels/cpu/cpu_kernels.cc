#include "kernels/cpu/cpu_kernels.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "kernels/cast_math.h"
#include "kernels/cpu/optim_simd.h"
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

inline float Load(const void* x, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(x)[i];
    case DType::kF16: return math::HalfToFloat(static_cast<const uint16_t*>(x)[i]);
    case DType::kBF16: return math::Bf16ToFloat(static_cast<const uint16_t*>(x)[i]);
  }
  return 0.0f;
}

inline void Store(void* x, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(x)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(x)[i] = math::FloatToHalf(v); break;
    case DType::kBF16: static_cast<uint16_t*>(x)[i] = math::FloatToBf16(v); break;
  }
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

// Tile [a, a+len) of raw gradients g (dtype gt) as fp32: in place for fp32,
// else cast into `tile` (kTile floats).
inline const float* GradTile(const void* g, DType gt, int64_t a, int64_t len, float* tile) {
  if (gt == DType::kF32) return static_cast<const float*>(g) + a;
  const uint16_t* h = static_cast<const uint16_t*>(g) + a;
  if (gt == DType::kBF16) {
    for (int64_t i = 0; i < len; ++i) tile[i] = math::Bf16ToFloat(h[i]);
  } else {
    for (int64_t i = 0; i < len; ++i) tile[i] = math::HalfToFloat(h[i]);
  }
  return tile;
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
    alignas(64) float tile[kTile];
    const float* g32 = GradTile(g, gt, a, len, tile);
    AdamTile(s, g32, p + a, m + a, v + a, static_cast<size_t>(len), w32);
    if (zero_grad) std::memset(static_cast<char*>(g) + a * ges, 0, len * ges);
  });
}

void SgdStepRawGrad(const math::SgdScalars& s, void* g, DType gt, float* p,
                    float* buf, int64_t n, void* work, DType work_dtype,
                    bool zero_grad) {
  const size_t ges = DTypeSize(gt);
  Tiled(n, work, work_dtype, p, [&](int64_t a, int64_t len, float* w32) {
    alignas(64) float tile[kTile];
    const float* g32 = GradTile(g, gt, a, len, tile);
    SgdTile(s, g32, p + a, buf ? buf + a : nullptr, static_cast<size_t>(len), w32);
    if (zero_grad) std::memset(static_cast<char*>(g) + a * ges, 0, len * ges);
  });
}

void ToF32(const void* src, DType t, float* dst, int64_t n, float scale) {
#pragma omp parallel for schedule(static) num_threads(Threads()) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] = Load(src, t, i) * scale;
}

void FromF32(const float* src, void* dst, DType t, int64_t n) {
  if (t == DType::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
#pragma omp parallel for schedule(static) num_threads(Threads()) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) Store(dst, t, i, src[i]);
}

void Accumulate(void* dst, const void* src, DType t, int64_t n) {
#pragma omp parallel for schedule(static) num_threads(Threads()) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) Store(dst, t, i, Load(dst, t, i) + Load(src, t, i));
}

void AccumulateF32(void* dst, const float* src, float scale, DType t,
                   int64_t n) {
#pragma omp parallel for schedule(static) num_threads(Threads()) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) Store(dst, t, i, Load(dst, t, i) + src[i] * scale);
}

double SumSquares(const void* x, DType t, int64_t n) {
  double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) schedule(static) num_threads(Threads()) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) acc += math::SquaredTerm(Load(x, t, i));
  return acc;
}

}  // namespace cpu
}  // namespace zero
