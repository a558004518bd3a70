// Muon's orthogonalisation (docs/ARCHITECTURE.md, "Muon"): the quintic
// Newton-Schulz iteration of DeepSpeed's zeropower_via_newtonschulz5 with its
// coefficients (3.4445, -4.7750, 2.0315), on a Frobenius-normalised matrix
// (eps 1e-7), transposed to wide first, then scaled by
// sqrt(max(1, rows / cols)) as DeepSpeed's muon_update does. DeepSpeed's
// "gram" method computes the same iteration; here it runs in fp32 on the
// owner rank's host.
#ifndef ZERO_CORE_OPTIM_NEWTON_SCHULZ_H_
#define ZERO_CORE_OPTIM_NEWTON_SCHULZ_H_

#include <cstdint>
#include <vector>

namespace zero {

inline constexpr float kMuonNsA = 3.4445f, kMuonNsB = -4.7750f, kMuonNsC = 2.0315f;

// The sizes of the iteration's work buffers for the largest of some
// matrices (each buffer sized for the matrix that needs it most): a matrix
// n x w with n <= w needs X, X^T and B X (n*w floats each), A and A A (n*n
// floats each) and one row of a product in double (w).
struct NewtonSchulzSizes {
  int64_t nw = 0, nn = 0, w = 0;
  void Fit(int64_t rows, int64_t cols);
  int64_t bytes() const { return (3 * nw + 2 * nn) * 4 + w * 8; }
};

// The work buffers themselves, made once for the sizes and reused by every
// call (the Muon phase keeps one: no allocation per step).
class NewtonSchulzWork {
 public:
  NewtonSchulzWork() = default;
  explicit NewtonSchulzWork(const NewtonSchulzSizes& s)
      : x(s.nw), xt(s.nw), bx(s.nw), a(s.nn), aa(s.nn), row(s.w) {}
  // What the buffers hold allocated (their capacity).
  int64_t bytes() const;
  // Whether a rows x cols matrix fits.
  bool Fits(int64_t rows, int64_t cols) const;

  std::vector<float> x, xt, bx, a, aa;
  std::vector<double> row;
};

// The Muon direction of the rows x cols matrix `m` (row-major), in place:
// `steps` iterations, then the aspect-ratio scale. `work` must fit the
// matrix (NewtonSchulzWork::Fits); the result does not depend on its size.
void NewtonSchulzOrthogonalize(float* m, int64_t rows, int64_t cols, int steps,
                               NewtonSchulzWork* work);
// The same with work buffers of its own (allocated per call).
void NewtonSchulzOrthogonalize(float* m, int64_t rows, int64_t cols, int steps);

}  // namespace zero

#endif  // ZERO_CORE_OPTIM_NEWTON_SCHULZ_H_
