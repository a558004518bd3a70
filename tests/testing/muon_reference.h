// Muon written out in double, independent of core/optim: DeepSpeed's
// muon_update (momentum lerp, Nesterov blend, the quintic Newton-Schulz
// iteration of zeropower_via_newtonschulz5 on the Frobenius-normalised,
// wide-transposed matrix, the sqrt(max(1, rows/cols)) scale) and
// MuonWithAuxAdam's step (decoupled decay, then -lr times the update).
#ifndef ZERO_TESTS_TESTING_MUON_REFERENCE_H_
#define ZERO_TESTS_TESTING_MUON_REFERENCE_H_

#include <cstdint>
#include <vector>

namespace zero {
namespace testing {

struct MuonReferenceHyper {
  double lr = 0.02, weight_decay = 0.0, momentum = 0.95;
  bool nesterov = true;
  int ns_steps = 5;
};

// The orthogonalised, scaled direction of a rows x cols matrix (row-major).
std::vector<double> MuonReferenceDirection(const std::vector<double>& g, int64_t rows,
                                           int64_t cols, int ns_steps);

// One Muon step of matrix `p` with gradient `g` (already unscaled and
// clipped); `momentum` is its buffer.
void MuonReferenceStep(const MuonReferenceHyper& h, const std::vector<double>& g,
                       int64_t rows, int64_t cols, std::vector<double>* p,
                       std::vector<double>* momentum);

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_MUON_REFERENCE_H_
