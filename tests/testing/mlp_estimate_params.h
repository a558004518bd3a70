// The test MLP's params as the memory estimator takes them
// (core/estimate/memory_estimate.h), from a trained result: the first, the
// embedding, frozen as MlpSpec::frozen_embedding makes it.
#ifndef ZERO_TESTS_TESTING_MLP_ESTIMATE_PARAMS_H_
#define ZERO_TESTS_TESTING_MLP_ESTIMATE_PARAMS_H_

#include <cstdint>
#include <vector>

#include "core/estimate/memory_estimate.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {

inline std::vector<EstimateParam> MlpEstimateParams(const MlpResult& r) {
  std::vector<EstimateParam> params;
  for (const std::vector<float>& p : r.params) {
    EstimateParam ep;
    ep.numel = static_cast<int64_t>(p.size());
    params.push_back(ep);
  }
  if (!params.empty()) params[0].trainable = false;
  return params;
}

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_MLP_ESTIMATE_PARAMS_H_
