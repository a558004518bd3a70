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

namespace zero {

inline constexpr float kMuonNsA = 3.4445f, kMuonNsB = -4.7750f, kMuonNsC = 2.0315f;

// The Muon direction of the rows x cols matrix `m` (row-major), in place:
// `steps` iterations, then the aspect-ratio scale.
void NewtonSchulzOrthogonalize(float* m, int64_t rows, int64_t cols, int steps);

}  // namespace zero

#endif  // ZERO_CORE_OPTIM_NEWTON_SCHULZ_H_
