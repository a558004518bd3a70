// Muon's owner-rank exchange on more matrices than the MLP has: six
// matrices (and two biases) trained 3 steps with the same gradients on every
// rank, so a run at any world size equals one rank's, whose stage 0
// orthogonalises locally with no exchange (tests/muon_test.cc and, under
// mpirun, tests/mpi_engine_main.cc).
#ifndef ZERO_TESTS_TESTING_MUON_MATRICES_H_
#define ZERO_TESTS_TESTING_MUON_MATRICES_H_

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/status_macros.h"
#include "core/config/config.h"
#include "core/engine/engine.h"

namespace zero {
namespace testing {

// Every param's master after the run. Collective.
inline absl::StatusOr<std::vector<std::vector<float>>> TrainMatrices(const Config& c,
                                                             Communicator* comm) {
  const std::vector<std::vector<int64_t>> shapes = {{12, 7}, {5, 9}, {7}, {20, 3},
                                                    {4, 4}, {9, 11}, {3}, {6, 2}};
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Create(c, comm));
  std::vector<int> ids;
  for (size_t i = 0; i < shapes.size(); ++i) {
    ParamSpec ps;
    ps.name = "layer" + std::to_string(i);
    ps.shape = shapes[i];
    ps.dtype = c.dtype;
    ASSIGN_OR_RETURN(int id, e->RegisterParam(ps));
    ids.push_back(id);
  }
  RETURN_IF_ERROR(e->Finalize());
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      ASSIGN_OR_RETURN(int64_t n, e->ParamNumel(ids[i]));
      std::vector<float> g(n);
      for (int64_t k = 0; k < n; ++k) g[k] = std::sin(0.37 * k + 1.3 * i + 0.71 * step) * 0.5f;
      ASSIGN_OR_RETURN(void* gb, e->GradBuffer(ids[i]));
      e->device()->Copy(gb, g.data(), n * 4);
      RETURN_IF_ERROR(e->GradReady(ids[i]));
    }
    RETURN_IF_ERROR(e->Step().status());
  }
  std::vector<std::vector<float>> out;
  for (int id : ids) {
    ASSIGN_OR_RETURN(int64_t n, e->ParamNumel(id));
    out.emplace_back(n);
    RETURN_IF_ERROR(e->ReadMaster(id, out.back().data()));
  }
  return out;
}

// max |a - b| over max |b|, over every param.
inline double MatricesRelDiff(const std::vector<std::vector<float>>& a,
                              const std::vector<std::vector<float>>& b) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    for (size_t k = 0; k < b[i].size() && k < a[i].size(); ++k) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[i][k]) - b[i][k]));
      mag = std::max(mag, std::fabs(static_cast<double>(b[i][k])));
    }
  }
  return mag > 0 ? diff / mag : diff;
}

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_MUON_MATRICES_H_
