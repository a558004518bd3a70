// Ranks that differ in control flow, data or timing (docs/ARCHITECTURE.md,
// "When ranks disagree"), at stages 0-3 and worlds 2 and 3 over thread
// ranks: each case either trains and equals its reference bit for bit, or
// fails on every rank within 2 s plus one collective's time (the timeout is
// 60 s: never reached) with a message naming the divergence.
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
  int last() const { return world() - 1; }
  std::string Dir(const std::string& name) const {
    const char* t = std::getenv("TEST_TMPDIR");
    return std::string(t ? t : "/tmp") + "/" + name + "_s" + std::to_string(stage()) + "_w" +
           std::to_string(world());
  }
};

// Every rank failed promptly, each message containing every piece of `want`.
void ExpectFailsEverywhere(const std::vector<DivergentOutcome>& out,
                           const std::vector<std::string>& want) {
  for (size_t r = 0; r < out.size(); ++r) {
    ASSERT_FALSE(out[r].status.ok()) << "rank " << r << " finished";
    EXPECT_LT(out[r].seconds, 2.5) << "rank " << r << ": " << out[r].status;
    for (const std::string& w : want) {
      EXPECT_NE(out[r].status.message().find(w), std::string::npos)
          << "rank " << r << " lacks '" << w << "': " << out[r].status;
    }
  }
}

void ExpectSame(const std::vector<DivergentOutcome>& got,
                const std::vector<DivergentOutcome>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_TRUE(got[r].status.ok()) << "rank " << r << ": " << got[r].status;
    ASSERT_TRUE(want[r].status.ok()) << "reference rank " << r << ": " << want[r].status;
    EXPECT_EQ(got[r].params, want[r].params) << "rank " << r << " differs from the reference";
    EXPECT_EQ(got[r].params, got[0].params) << "rank " << r << " differs from rank 0";
  }
}

TEST_P(DivergenceTest, SameControlFlowTrains) {
  DivergentPlan plan;
  auto out = RunDivergentOnThreads(DivergentConfig(stage(), 1), world(), plan);
  for (const auto& o : out) {
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.params, out[0].params);
    EXPECT_LT(o.seconds, 5.0);
  }
}

// The last rank does not call experts.1 at step 1 (a mixture-of-experts
// layer whose expert got no tokens there). Stage 1 reduces the whole local
// gradient once at the boundary, so the param counts as a zero gradient
// from that rank: equal, bit for bit, to handing in zeros. Elsewhere the
// ranks would pair other params' collectives: an error naming both.
TEST_P(DivergenceTest, SkippedExpert) {
  const int l = last();
  DivergentPlan plan;
  plan.uses = [l](int rank, int step, int, int p) { return !(rank == l && step == 1 && p == 2); };
  auto out = RunDivergentOnThreads(DivergentConfig(stage(), 1), world(), plan);
  if (stage() == 1) {
    DivergentPlan ref;
    ref.zero_grad = [l](int rank, int step, int, int p) { return rank == l && step == 1 && p == 2; };
    ExpectSame(out, RunDivergentOnThreads(DivergentConfig(stage(), 1), world(), ref));
    return;
  }
  ExpectFailsEverywhere(out, {"ranks diverged at collective", "experts.1.weight",
                              "step 1", "different params"});
  // Every rank's flight recorder ends at the collective where the ranks
  // parted, marked as such; the ones before agreed.
  for (const auto& o : out) {
    ASSERT_FALSE(o.flight_record.empty());
    const std::string tail = o.flight_record.substr(o.flight_record.rfind('{'));
    EXPECT_NE(tail.find("\"outcome\":\"diverged\""), std::string::npos) << tail;
  }
}

// A different branch per rank: rank r only ever uses expert r % 3.
TEST_P(DivergenceTest, DifferentBranchPerRank) {
  DivergentPlan plan;
  plan.uses = [](int rank, int, int, int p) { return p == 0 || p == 4 || p == 1 + rank % 3; };
  auto out = RunDivergentOnThreads(DivergentConfig(stage(), 1), world(), plan);
  if (stage() == 1) {
    DivergentPlan ref;
    ref.zero_grad = [](int rank, int, int, int p) { return p >= 1 && p <= 3 && p != 1 + rank % 3; };
    ExpectSame(out, RunDivergentOnThreads(DivergentConfig(stage(), 1), world(), ref));
    return;
  }
  ExpectFailsEverywhere(out, {"ranks diverged at collective", "experts.0.weight",
                              "experts.1.weight"});
}

// The last rank has one batch fewer, then every rank saves: the save meets
// the other ranks' last step.
TEST_P(DivergenceTest, FewerStepsThenSave) {
  const int l = last();
  DivergentPlan plan;
  plan.steps_of = [l](int rank) { return rank == l ? 2 : 3; };
  plan.saves = [](int) { return true; };
  plan.save_dir = Dir("fewer_steps");
  auto out = RunDivergentOnThreads(DivergentConfig(stage(), 1), world(), plan);
  ExpectFailsEverywhere(out, {"ranks diverged at collective", "save_checkpoint",
                              "must be made on every rank"});
}

// The last rank runs an extra micro-step in the first accumulation
// (accumulation 2), then every rank saves: it is mid-accumulation there.
TEST_P(DivergenceTest, ExtraMicroStepThenSave) {
  const int l = last();
  DivergentPlan plan;
  plan.extra_micros = [l](int rank, int step) { return rank == l && step == 0 ? 1 : 0; };
  plan.saves = [](int) { return true; };
  plan.save_dir = Dir("extra_micro");
  auto out = RunDivergentOnThreads(DivergentConfig(stage(), 2), world(), plan);
  ExpectFailsEverywhere(out, {"ranks diverged at collective", "save_checkpoint"});
}

// A save called on rank 0 alone while the others go on training.
TEST_P(DivergenceTest, SaveOnRankZeroOnly) {
  DivergentPlan plan;
  plan.steps_of = [](int rank) { return rank == 0 ? 2 : 3; };
  plan.saves = [](int rank) { return rank == 0; };
  plan.save_dir = Dir("subset_save");
  auto out = RunDivergentOnThreads(DivergentConfig(stage(), 1), world(), plan);
  ExpectFailsEverywhere(out, {"save_checkpoint", "must be made on every rank"});
}

// A state_dict (read_master of every param) on rank 0 alone while the
// others go on training. At stage 0 each rank holds every master and
// read_master is local, so the case does not arise.
TEST_P(DivergenceTest, StateReadOnRankZeroOnly) {
  if (stage() == 0) GTEST_SKIP() << "read_master is local at stage 0";
  DivergentPlan plan;
  plan.steps_of = [](int rank) { return rank == 0 ? 2 : 3; };
  plan.reads_state = [](int rank) { return rank == 0; };
  auto out = RunDivergentOnThreads(DivergentConfig(stage(), 1), world(), plan);
  ExpectFailsEverywhere(out, {"read_master", "must be made on every rank"});
}

// After a divergence the engine refuses every later call.
TEST_P(DivergenceTest, MismatchIsTypedAndFinal) {
  if (stage() == 1) GTEST_SKIP() << "stage 1 trains through a skipped param";
  const int l = last();
  DivergentPlan plan;
  plan.uses = [l](int rank, int step, int, int p) { return !(rank == l && step == 0 && p == 3); };
  auto out = RunDivergentOnThreads(DivergentConfig(stage(), 1), world(), plan);
  for (const auto& o : out) {
    ASSERT_FALSE(o.status.ok());
    // Either the divergence itself (ZERO_MISMATCH) or, on a rank whose
    // reduction on the stream saw it first, the engine refusing the call.
    EXPECT_TRUE(IsMismatch(o.status) || o.status.message().find("unusable") != std::string::npos)
        << o.status;
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
