// The double-precision reference's view of a packed moments format
// (optimizer.moments_format, docs/ARCHITECTURE.md "Optimizer state
// formats"), written out here independently of kernels/: after each step
// the stored moments are rounded as the format stores them: bf16 to nearest
// even, 8-bit to the nearest value of a minifloat map (3 mantissa bits,
// linear steps below the smallest binade) times the absmax of their
// 64-element block of the flat group layout.
#ifndef ZERO_TESTS_TESTING_MOMENTS_ROUNDING_H_
#define ZERO_TESTS_TESTING_MOMENTS_ROUNDING_H_

#include <cstdint>
#include <vector>

#include "core/config/config.h"

namespace zero {
namespace testing {

// The 8-bit map's magnitudes relative to the absmax, ascending, index =
// magnitude code: 8 linear steps from 0, 8 values per binade, and for
// exp_avg_sq 32 per binade over the 3 binades below 1, then exactly 1;
// exp_avg's (signed) spans 15 binades (121 values), exp_avg_sq's 22 (249).
std::vector<double> MinifloatMap(bool is_signed);

// The index of the entry of `map` nearest to x >= 0 (past the last entry:
// the last); ties to the even index.
int NearestCode(const std::vector<double>& map, double x);

// x rounded to bf16, nearest even.
double RoundBf16(double x);

// Rounds the moments m, v (per param, registration order; those of params
// not `trainable` are left alone) as `c.moments_format` stores them; fp32
// keeps them as they are (double here).
void RoundMoments(const Config& c, const std::vector<bool>& trainable,
                  std::vector<std::vector<double>>* m, std::vector<std::vector<double>>* v);

// c, with Adam's lr, betas, eps and weight_decay as the fp32 values the
// engine computes with when c's moments are packed: rounding what is stored
// turns a 4.7e-5 relative difference (1 - 0.999f against 0.001) into whole
// rounding steps. Other formats: c itself.
Config ReferenceHyperParams(const Config& c);

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_MOMENTS_ROUNDING_H_
