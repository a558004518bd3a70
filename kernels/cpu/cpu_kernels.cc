#include "kernels/cpu/cpu_kernels.h"

#include <cstring>

#include "kernels/cast_math.h"
#include "kernels/norm_math.h"

namespace zero {
namespace cpu {
namespace {

// Below this many elements threads cost more than they save.
constexpr int64_t kParallelMin = 1 << 15;

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

}  // namespace

void AdamStep(const math::AdamScalars& s, const float* g, float* p, float* m,
              float* v, int64_t n, void* work, DType work_dtype) {
  if (work == nullptr) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) math::AdamUpdate(s, g[i], &p[i], &m[i], &v[i]);
    return;
  }
  if (work_dtype == DType::kF32) {
    float* w = static_cast<float*>(work);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      math::AdamUpdate(s, g[i], &p[i], &m[i], &v[i]);
      w[i] = p[i];
    }
    return;
  }
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    math::AdamUpdate(s, g[i], &p[i], &m[i], &v[i]);
    Store(work, work_dtype, i, p[i]);
  }
}

void SgdStep(const math::SgdScalars& s, const float* g, float* p, float* buf,
             int64_t n, void* work, DType work_dtype) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float unused = 0.0f;
    math::SgdUpdate(s, g[i], &p[i], buf ? &buf[i] : &unused);
    if (work) Store(work, work_dtype, i, p[i]);
  }
}

void ToF32(const void* src, DType t, float* dst, int64_t n, float scale) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] = Load(src, t, i) * scale;
}

void FromF32(const float* src, void* dst, DType t, int64_t n) {
  if (t == DType::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) Store(dst, t, i, src[i]);
}

void Accumulate(void* dst, const void* src, DType t, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) Store(dst, t, i, Load(dst, t, i) + Load(src, t, i));
}

void AccumulateF32(void* dst, const float* src, float scale, DType t,
                   int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) Store(dst, t, i, Load(dst, t, i) + src[i] * scale);
}

double SumSquares(const void* x, DType t, int64_t n) {
  double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) acc += math::SquaredTerm(Load(x, t, i));
  return acc;
}

}  // namespace cpu
}  // namespace zero
