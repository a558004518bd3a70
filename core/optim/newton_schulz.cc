#include "core/optim/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace zero {
namespace {

// c = a (n x k) times b (k x m), row-major, accumulated in double per row
// (`row`: m doubles).
void MatMul(const float* a, const float* b, float* c, int64_t n, int64_t k, int64_t m,
            double* row) {
  for (int64_t i = 0; i < n; ++i) {
    std::fill(row, row + m, 0.0);
    for (int64_t p = 0; p < k; ++p) {
      const double x = a[i * k + p];
      const float* br = b + p * m;
      for (int64_t j = 0; j < m; ++j) row[j] += x * br[j];
    }
    for (int64_t j = 0; j < m; ++j) c[i * m + j] = static_cast<float>(row[j]);
  }
}

}  // namespace

void NewtonSchulzSizes::Fit(int64_t rows, int64_t cols) {
  const int64_t n = std::min(rows, cols), wide = std::max(rows, cols);
  nw = std::max(nw, n * wide);
  nn = std::max(nn, n * n);
  w = std::max(w, wide);
}

int64_t NewtonSchulzWork::bytes() const {
  return static_cast<int64_t>(x.capacity() + xt.capacity() + bx.capacity() + a.capacity() +
                              aa.capacity()) * 4 +
         static_cast<int64_t>(row.capacity()) * 8;
}

bool NewtonSchulzWork::Fits(int64_t rows, int64_t cols) const {
  NewtonSchulzSizes s;
  s.Fit(rows, cols);
  return static_cast<int64_t>(x.size()) >= s.nw && static_cast<int64_t>(xt.size()) >= s.nw &&
         static_cast<int64_t>(bx.size()) >= s.nw && static_cast<int64_t>(a.size()) >= s.nn &&
         static_cast<int64_t>(aa.size()) >= s.nn && static_cast<int64_t>(row.size()) >= s.w;
}

void NewtonSchulzOrthogonalize(float* m, int64_t rows, int64_t cols, int steps,
                               NewtonSchulzWork* work) {
  // X is n x w with n <= w: the tall matrix's transpose.
  const bool tall = rows > cols;
  const int64_t n = tall ? cols : rows, w = tall ? rows : cols;
  float* x = work->x.data();
  float* xt = work->xt.data();
  float* a = work->a.data();
  float* aa = work->aa.data();
  float* bx = work->bx.data();
  double* row = work->row.data();
  double sumsq = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const float v = m[i * cols + j];
      sumsq += static_cast<double>(v) * v;
      x[tall ? j * w + i : i * w + j] = v;
    }
  }
  const float inv = static_cast<float>(1.0 / (std::sqrt(sumsq) + 1e-7));
  for (int64_t i = 0; i < n * w; ++i) x[i] *= inv;
  for (int s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < w; ++j) xt[j * n + i] = x[i * w + j];
    }
    MatMul(x, xt, a, n, w, n, row);   // A = X X^T
    MatMul(a, a, aa, n, n, n, row);   // A A
    for (int64_t i = 0; i < n * n; ++i) a[i] = kMuonNsB * a[i] + kMuonNsC * aa[i];  // B
    MatMul(a, x, bx, n, n, w, row);   // B X
    for (int64_t i = 0; i < n * w; ++i) x[i] = kMuonNsA * x[i] + bx[i];
  }
  const float scale = tall ? static_cast<float>(std::sqrt(static_cast<double>(rows) / cols)) : 1.0f;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) m[i * cols + j] = scale * x[tall ? j * w + i : i * w + j];
  }
}

void NewtonSchulzOrthogonalize(float* m, int64_t rows, int64_t cols, int steps) {
  NewtonSchulzSizes s;
  s.Fit(rows, cols);
  NewtonSchulzWork work(s);
  NewtonSchulzOrthogonalize(m, rows, cols, steps, &work);
}

}  // namespace zero
