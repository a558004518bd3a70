#include "core/optim/newton_schulz.h"

#include <cmath>
#include <vector>

namespace zero {
namespace {

// c = a (n x k) times b (k x m), row-major, accumulated in double per row.
void MatMul(const float* a, const float* b, float* c, int64_t n, int64_t k, int64_t m) {
  std::vector<double> row(m);
  for (int64_t i = 0; i < n; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t p = 0; p < k; ++p) {
      const double x = a[i * k + p];
      const float* br = b + p * m;
      for (int64_t j = 0; j < m; ++j) row[j] += x * br[j];
    }
    for (int64_t j = 0; j < m; ++j) c[i * m + j] = static_cast<float>(row[j]);
  }
}

}  // namespace

void NewtonSchulzOrthogonalize(float* m, int64_t rows, int64_t cols, int steps) {
  // X is n x w with n <= w: the tall matrix's transpose.
  const bool tall = rows > cols;
  const int64_t n = tall ? cols : rows, w = tall ? rows : cols;
  std::vector<float> x(n * w);
  double sumsq = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const float v = m[i * cols + j];
      sumsq += static_cast<double>(v) * v;
      x[tall ? j * w + i : i * w + j] = v;
    }
  }
  const float inv = static_cast<float>(1.0 / (std::sqrt(sumsq) + 1e-7));
  for (float& v : x) v *= inv;
  std::vector<float> xt(w * n), a(n * n), aa(n * n), bx(n * w);
  for (int s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < w; ++j) xt[j * n + i] = x[i * w + j];
    }
    MatMul(x.data(), xt.data(), a.data(), n, w, n);   // A = X X^T
    MatMul(a.data(), a.data(), aa.data(), n, n, n);   // A A
    for (int64_t i = 0; i < n * n; ++i) a[i] = kMuonNsB * a[i] + kMuonNsC * aa[i];  // B
    MatMul(a.data(), x.data(), bx.data(), n, n, w);   // B X
    for (int64_t i = 0; i < n * w; ++i) x[i] = kMuonNsA * x[i] + bx[i];
  }
  const float scale = tall ? static_cast<float>(std::sqrt(static_cast<double>(rows) / cols)) : 1.0f;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) m[i * cols + j] = scale * x[tall ? j * w + i : i * w + j];
  }
}

}  // namespace zero
