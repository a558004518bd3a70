// ZeRO stages 0-3 over the thread communicator: the same global batch split
// across W ranks ends where single-rank stage 0 ends, and (fp32) where plain
// double-precision training ends; memory and traffic match docs/ARCHITECTURE.md ("Memory and traffic").
#include <gtest/gtest.h>

#include <mutex>

#include "core/common/dtype.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

Config BaseConfig(int stage, DType dtype) { return SmallMlpConfig(stage, dtype); }

MlpResult SingleRankStage0(Config c, const MlpSpec& spec) {
  c.stage = 0;
  return TrainAt(c, 1, spec);
}

struct Case {
  int stage;
  DType dtype;
};

class StagesTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// Tolerances: fp32 1e-6 of the largest param (the bound); fp16/bf16
// gradients are rounded per rank and reduced in their own format
// (DeepSpeed's default communication_data_type), so results move by about
// their epsilon times the step count.
double Tolerance(DType t) {
  switch (t) {
    case DType::kF32: return 1e-6;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 4e-2;  // ten bf16 epsilons (2^-8)
  }
  return 0;
}

TEST_P(StagesTest, MatchesSingleRankStage0) {
  const int stage = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const DType dtype = static_cast<DType>(std::get<2>(GetParam()));
  Config c = BaseConfig(stage, dtype);
  MlpSpec spec;
  MlpResult ref = SingleRankStage0(c, spec);
  MlpResult got = TrainAt(c, world, spec);
  EXPECT_LE(MaxRelDiff(got, ref), Tolerance(dtype))
      << "stage " << stage << " world " << world << " " << DTypeName(dtype);
  ASSERT_EQ(got.steps.size(), 10u);
  EXPECT_EQ(got.steps.back().global_step, 10);
}

INSTANTIATE_TEST_SUITE_P(
    AllStagesWorldsDtypes, StagesTest,
    ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(2, 3, 4),
                       ::testing::Values(0, 1, 2)),
    [](const ::testing::TestParamInfo<StagesTest::ParamType>& i) {
      return "stage" + std::to_string(std::get<0>(i.param)) + "_world" +
             std::to_string(std::get<1>(i.param)) + "_" +
             DTypeName(static_cast<DType>(std::get<2>(i.param)));
    });

TEST(StagesTest, Fp32SingleRankMatchesDoublePrecisionReference) {
  for (int stage = 0; stage <= 3; ++stage) {
    Config c = BaseConfig(stage, DType::kF32);
    MlpSpec spec;
    MlpResult ref = TrainMlpReference(c, spec);
    MlpResult got = TrainAt(c, 1, spec);
    EXPECT_LE(MaxRelDiff(got, ref), 1e-5) << "stage " << stage;
  }
}

TEST(StagesTest, FrozenParamGetsNoStateAndStaysPut) {
  Config c = BaseConfig(3, DType::kF32);
  MlpSpec spec;
  MlpResult ref = TrainMlpReference(c, spec);
  MlpResult got = TrainAt(c, 3, spec);
  EXPECT_LE(MaxRelDiff(got, ref), 1e-5);
  EXPECT_EQ(got.names[0], "embed");
  EXPECT_EQ(got.params[0], ref.params[0]);  // bitwise: never updated
  // Optimizer state covers trainable elements only.
  EXPECT_EQ(got.stats.trainable_numel, 25 * 8 + 25 + 3 * 25 + 3);
  EXPECT_EQ(got.stats.frozen_bytes, 8 * 4);
}

TEST(StagesTest, GradientAccumulationAcrossRanks) {
  for (int stage = 0; stage <= 3; ++stage) {
    Config c = BaseConfig(stage, DType::kF32);
    c.gradient_accumulation_steps = 2;
    MlpSpec spec;
    MlpResult ref = TrainMlpReference(c, spec);
    MlpResult single = SingleRankStage0(c, spec);
    MlpResult got = TrainAt(c, 3, spec);
    EXPECT_LE(MaxRelDiff(single, ref), 1e-5) << "stage " << stage;
    EXPECT_LE(MaxRelDiff(got, single), 1e-6) << "stage " << stage;
  }
}

TEST(StagesTest, ClippingActiveAcrossRanks) {
  for (int stage = 0; stage <= 3; ++stage) {
    Config c = BaseConfig(stage, DType::kF32);
    c.gradient_clipping = 0.05;  // well below the norms seen (~0.3-1)
    MlpSpec spec;
    MlpResult ref = TrainMlpReference(c, spec);
    MlpResult got = TrainAt(c, 4, spec);
    EXPECT_LE(MaxRelDiff(got, ref), 1e-5) << "stage " << stage;
    MlpResult single = SingleRankStage0(c, spec);
    EXPECT_LE(MaxRelDiff(got, single), 1e-6) << "stage " << stage;
    for (const StepInfo& s : got.steps) EXPECT_GT(s.grad_norm, 0.05);
  }
}

// overlap_comm: buckets reduce on the comm thread while the caller fills the
// next; the result must not change.
TEST(StagesTest, OverlapCommGivesTheSameResult) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kF16}) {
      Config c = BaseConfig(stage, t);
      c.overlap_comm = 1;
      c.reduce_bucket_size = 64;  // many buckets in flight per step
      c.gradient_accumulation_steps = 2;
      MlpSpec spec;
      Config sync = c;
      sync.overlap_comm = 0;
      MlpResult a = TrainAt(c, 3, spec);
      MlpResult b = TrainAt(sync, 3, spec);
      EXPECT_EQ(MaxRelDiff(a, b), 0.0) << "stage " << stage << " " << DTypeName(t);
    }
  }
}

TEST(StagesTest, Fp16OverflowOnOneRankSkipsTheStepEverywhere) {
  for (int stage = 0; stage <= 3; ++stage) {
    Config c = BaseConfig(stage, DType::kF16);
    MlpSpec spec;
    spec.inf_step = 3;
    spec.inf_rank = 2;  // only the last of three ranks sees the inf
    MlpResult got = TrainAt(c, 3, spec);
    ASSERT_EQ(got.steps.size(), 10u);
    EXPECT_TRUE(got.steps[3].skipped) << "stage " << stage;
    EXPECT_EQ(got.steps.back().skipped_steps, 1);
    EXPECT_EQ(got.steps.back().global_step, 9);
    // Hysteresis 2: the first overflow keeps the scale at 2^8.
    EXPECT_EQ(got.steps[3].loss_scale, 256.0);
    MlpSpec single_spec = spec;
    single_spec.inf_rank = 0;
    MlpResult single = SingleRankStage0(c, single_spec);
    EXPECT_LE(MaxRelDiff(got, single), Tolerance(DType::kF16)) << "stage " << stage;
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
