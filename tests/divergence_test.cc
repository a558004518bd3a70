// Ranks that differ in control flow, data or timing (docs/ARCHITECTURE.md,
// "When ranks disagree"), at stages 0-3 and worlds 2 and 3 over thread
// ranks (divergence_mpi_np2/np3 run the same cases under mpirun): each case
// either trains and equals its reference bit for bit, or fails on every
// rank within 2.5 s (the timeout is 60 s: never reached) with a message
// naming the divergence (tests/testing/divergent_run.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "tests/testing/divergent_run.h"

namespace zero {
namespace testing {
namespace {

struct Case {
  int stage;
  int world;
};

class DivergenceTest : public ::testing::TestWithParam<Case> {
 protected:
  int stage() const { return GetParam().stage; }
  int world() const { return GetParam().world; }
  std::string Dir() const {
    const char* t = std::getenv("TEST_TMPDIR");
    return std::string(t ? t : "/tmp") + "/s" + std::to_string(stage()) + "_w" +
           std::to_string(world());
  }
};

TEST_P(DivergenceTest, SameControlFlowTrains) {
  auto out = RunDivergentOnThreads(DivergentConfig(stage(), 1), world(), DivergentPlan{});
  for (const auto& o : out) {
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.params, out[0].params);
  }
}

TEST_P(DivergenceTest, EachCaseTrainsOrFailsEverywhere) {
  for (const DivergentCase& c : DivergentCases(stage(), world(), Dir())) {
    const Config config = DivergentConfig(stage(), c);
    auto out = RunDivergentOnThreads(config, world(), c.plan);
    std::vector<DivergentOutcome> ref;
    if (c.trains) ref = RunDivergentOnThreads(config, world(), c.reference);
    for (int r = 0; r < world(); ++r) {
      EXPECT_EQ(CheckDivergentRank(c, r, out[r], c.trains ? &ref[r] : nullptr), "");
      if (c.trains) {
        EXPECT_EQ(out[r].params, out[0].params) << c.name << ": rank " << r;
      } else if (!out[r].status.ok()) {
        // Either the divergence itself (ZERO_MISMATCH) or, on a rank whose
        // reduction on the stream saw it first, the engine refusing calls.
        EXPECT_TRUE(IsMismatch(out[r].status) ||
                    out[r].status.message().find("unusable") != std::string::npos)
            << c.name << ": rank " << r << ": " << out[r].status;
        // The flight recorder ends at the collective where the ranks
        // parted, marked as such; every one before it agreed.
        const std::string& fr = out[r].flight_record;
        ASSERT_FALSE(fr.empty()) << c.name;
        if (c.checked_at_boundary) {
          EXPECT_EQ(fr.find("\"outcome\":\"diverged\""), std::string::npos) << c.name;
          continue;
        }
        const std::string tail = fr.substr(fr.rfind('{'));
        EXPECT_NE(tail.find("\"outcome\":\"diverged\""), std::string::npos)
            << c.name << ": rank " << r << ": " << tail;
        EXPECT_EQ(fr.find("\"outcome\":\"diverged\""), fr.rfind('{') + tail.find("\"outcome\""))
            << c.name << ": one divergence, the last record";
      }
    }
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> c;
  for (int world : {2, 3}) {
    for (int stage = 0; stage <= 3; ++stage) c.push_back({stage, world});
  }
  return c;
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, DivergenceTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return "stage" + std::to_string(i.param.stage) + "_world" +
                                  std::to_string(i.param.world);
                         });

}  // namespace
}  // namespace testing
}  // namespace zero
