// What the equivalence tests compare: two runs' results bit for bit, and a
// checkpoint's states read whole (so two checkpoints can be compared).
#ifndef ZERO_TESTS_TESTING_EXPECT_SAME_H_
#define ZERO_TESTS_TESTING_EXPECT_SAME_H_

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/ckpt/checkpoint_reader.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {

// The params and each step's norm, skip and loss scale, bit for bit.
inline void ExpectSameBits(const MlpResult& a, const MlpResult& b, const std::string& what) {
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t p = 0; p < a.params.size(); ++p) {
    ASSERT_EQ(a.params[p].size(), b.params[p].size()) << what;
    EXPECT_EQ(std::memcmp(a.params[p].data(), b.params[p].data(), a.params[p].size() * 4), 0)
        << what << ": param " << a.names[p] << " differs";
  }
  ASSERT_EQ(a.steps.size(), b.steps.size()) << what;
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(a.steps[s].grad_norm, b.steps[s].grad_norm) << what << ": step " << s;
    EXPECT_EQ(a.steps[s].skipped, b.steps[s].skipped) << what << ": step " << s;
    EXPECT_EQ(a.steps[s].loss_scale, b.steps[s].loss_scale) << what << ": step " << s;
  }
}

// Every state of every param in checkpoint `tag` of `dir` (the master, and
// for trainable params the optimizer's), read whole, keyed "name/state".
inline std::map<std::string, std::vector<float>> CheckpointStates(const std::string& dir,
                                                                  const std::string& tag) {
  std::map<std::string, std::vector<float>> out;
  auto ck = ckpt::Checkpoint::Open(dir, tag);
  EXPECT_TRUE(ck.ok()) << ck.status();
  if (!ck.ok()) return out;
  const ckpt::Manifest& m = (*ck)->manifest();
  for (const ckpt::ParamRecord& p : m.params) {
    std::vector<int> kinds = {ckpt::kMaster};
    if (p.trainable) kinds.insert(kinds.end(), m.states.begin(), m.states.end());
    for (int k : kinds) {
      std::vector<float> v(p.numel);
      absl::Status s = (*ck)->ReadRange(p, k, 0, p.numel, v.data(), nullptr);
      EXPECT_TRUE(s.ok()) << s;
      out[p.name + "/" + ckpt::StateName(k)] = std::move(v);
    }
  }
  return out;
}

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_EXPECT_SAME_H_
