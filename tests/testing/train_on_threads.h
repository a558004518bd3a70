// GoogleTest helpers over the MLP harness: train on thread ranks, expect
// every rank to succeed (and, for TrainAt, to agree bit for bit).
#ifndef ZERO_TESTS_TESTING_TRAIN_ON_THREADS_H_
#define ZERO_TESTS_TESTING_TRAIN_ON_THREADS_H_

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {

// Every rank's result; a failed rank fails the test and leaves its empty.
inline std::vector<MlpResult> TrainAll(const Config& c, int world,
                                       const MlpSpec& spec) {
  std::vector<MlpResult> results(world);
  std::mutex mu;
  RunThreads(world, [&](int rank, Communicator* comm) {
    auto r = TrainMlp(c, comm, spec);
    std::lock_guard<std::mutex> l(mu);
    EXPECT_TRUE(r.ok()) << "rank " << rank << ": " << r.status();
    if (r.ok()) results[rank] = std::move(*r);
  });
  return results;
}

// Rank 0's result, after checking that every rank ended with the same bits.
inline MlpResult TrainAt(const Config& c, int world, const MlpSpec& spec) {
  std::vector<MlpResult> results = TrainAll(c, world, spec);
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(MaxRelDiff(results[r], results[0]), 0.0) << "rank " << r << " disagrees";
  }
  return results[0];
}

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_TRAIN_ON_THREADS_H_
