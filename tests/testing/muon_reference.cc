#include "tests/testing/muon_reference.h"

#include <cmath>

namespace zero {
namespace testing {
namespace {

using Mat = std::vector<double>;

Mat Mul(const Mat& a, const Mat& b, int64_t n, int64_t k, int64_t m) {
  Mat c(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t j = 0; j < m; ++j) c[i * m + j] += a[i * k + p] * b[p * m + j];
    }
  }
  return c;
}

Mat Transpose(const Mat& a, int64_t n, int64_t m) {
  Mat t(n * m);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) t[j * n + i] = a[i * m + j];
  }
  return t;
}

}  // namespace

std::vector<double> MuonReferenceDirection(const std::vector<double>& g, int64_t rows,
                                           int64_t cols, int ns_steps) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool tall = rows > cols;
  Mat x = tall ? Transpose(g, rows, cols) : g;
  const int64_t n = tall ? cols : rows, w = tall ? rows : cols;
  double norm = 0;
  for (double v : x) norm += v * v;
  norm = std::sqrt(norm) + 1e-7;
  for (double& v : x) v /= norm;
  for (int s = 0; s < ns_steps; ++s) {
    const Mat A = Mul(x, Transpose(x, n, w), n, w, n);
    const Mat AA = Mul(A, A, n, n, n);
    Mat B(n * n);
    for (int64_t i = 0; i < n * n; ++i) B[i] = b * A[i] + c * AA[i];
    const Mat BX = Mul(B, x, n, n, w);
    for (int64_t i = 0; i < n * w; ++i) x[i] = a * x[i] + BX[i];
  }
  Mat out = tall ? Transpose(x, n, w) : x;
  const double scale = rows > cols ? std::sqrt(static_cast<double>(rows) / cols) : 1.0;
  for (double& v : out) v *= scale;
  return out;
}

void MuonReferenceStep(const MuonReferenceHyper& h, const std::vector<double>& g,
                       int64_t rows, int64_t cols, std::vector<double>* p,
                       std::vector<double>* momentum) {
  std::vector<double> u(g.size());
  for (size_t k = 0; k < g.size(); ++k) {
    double& m = (*momentum)[k];
    m = h.momentum * m + (1 - h.momentum) * g[k];
    u[k] = h.nesterov ? (1 - h.momentum) * g[k] + h.momentum * m : m;
  }
  const std::vector<double> o = MuonReferenceDirection(u, rows, cols, h.ns_steps);
  for (size_t k = 0; k < g.size(); ++k) {
    (*p)[k] = (*p)[k] * (1 - h.lr * h.weight_decay) - h.lr * o[k];
  }
}

}  // namespace testing
}  // namespace zero
