// Lion and Adagrad (DeepSpeed's semantics, docs/DEEPSPEED_COMPAT.md) through
// the one optimizer interface (core/optim/optimizer.h): at stages 0-3, fp32
// and bf16, worlds 1 and 3, against the double-precision reference of
// tests/testing/mlp_harness.h after 1, 3 and 10 steps; with the state in
// memory, in host memory beside an off-host device (ZeRO-Offload) and on
// NVMe, bit for bit alike; a checkpoint resharded from 3 ranks to 1; a
// checkpoint of one optimizer refused by another, naming both; the state's
// bytes per param measured against the formula and the estimator; the
// DeepSpeed config names.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "core/config/config.h"
#include "core/estimate/memory_estimate.h"
#include "tests/testing/fresh_dir.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/optimizer_sweep.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

Config OptimizerConfig(const std::string& mode, int stage, DType dtype) {
  Config c = SmallMlpConfig(stage, dtype);
  c.sub_group_size = 96;  // several NVMe chunks and offload pieces per group
  ApplyStepMode(mode, &c);
  return c;
}

class OptimizerKindsTest
    : public ::testing::TestWithParam<std::tuple<std::string, SweepCase>> {};

TEST_P(OptimizerKindsTest, MatchesDoublePrecisionReferenceStepByStep) {
  const std::string mode = std::get<0>(GetParam());
  const SweepCase& s = std::get<1>(GetParam());
  const Config c = OptimizerConfig(mode, s.stage, s.dtype);
  ExpectMatchesReferenceStepByStep(c, s.world, SweepTolerance(s.dtype), mode);
}

INSTANTIATE_TEST_SUITE_P(
    LionAdagradStagesWorldsDtypes, OptimizerKindsTest,
    ::testing::Combine(::testing::Values("lion", "adagrad"),
                       ::testing::ValuesIn(StagesWorldsDtypes())),
    [](const ::testing::TestParamInfo<OptimizerKindsTest::ParamType>& i) {
      return std::get<0>(i.param) + "_" + SweepCaseName(std::get<1>(i.param));
    });

// Offload moves the state, not the arithmetic: CPU offload beside an
// off-host device and NVMe offload train to the in-memory run's bits.
TEST(OptimizerKindsOffload, CpuAndNvmeOffloadGiveTheInMemoryBits) {
  for (const std::string mode : {"lion", "adagrad"}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (DType t : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(mode + " stage " + std::to_string(stage) + " " + DTypeName(t));
        const Config c = OptimizerConfig(mode, stage, t);
        const MlpResult memory = TrainAt(c, 3, MlpSpec());
        EXPECT_LE(MaxRelDiff(memory, TrainMlpReference(c, MlpSpec())), SweepTolerance(t));
        ExpectNvmeOffloadGivesTheBits(c, memory, "optimizer_kinds_nvme");
        ExpectCpuOffloadGivesTheOnDeviceBits(c, memory, SweepTolerance(t));
      }
    }
  }
}

// A Lion checkpoint saved at 3 ranks, resumed at 1: the same end as
// training through; an Adam checkpoint refused by a Lion engine and the
// reverse, each error naming both optimizers.
TEST(OptimizerKindsCheckpoint, ReshardsAndRefusesAnotherOptimizer) {
  for (const std::string mode : {"lion", "adagrad"}) {
    const Config c = OptimizerConfig(mode, 2, DType::kF32);
    MlpSpec spec;
    spec.ckpt_dir = FreshDir("optimizer_kinds_ckpt");
    spec.save_after = 4;
    const MlpResult through = TrainAt(c, 3, spec);
    MlpSpec resume;
    resume.resume_dir = spec.ckpt_dir;
    resume.resume_tag = "mid";
    Config one = c;
    one.stage = 3;
    const MlpResult resumed = TrainAt(one, 1, resume);
    EXPECT_LE(MaxRelDiff(resumed, through), 1e-6) << mode;

    const Config adam = OptimizerConfig("", 2, DType::kF32);
    for (const bool adam_into_other : {true, false}) {
      MlpSpec save;
      save.ckpt_dir = FreshDir("optimizer_kinds_mixed");
      save.steps = 2;
      save.final_tag = "end";
      (void)TrainAt(adam_into_other ? adam : c, 1, save);
      MlpSpec load;
      load.resume_dir = save.ckpt_dir;
      load.resume_tag = "end";
      RunThreads(1, [&](int, Communicator* comm) {
        auto r = TrainMlp(adam_into_other ? c : adam, comm, load);
        ASSERT_FALSE(r.ok());
        EXPECT_NE(r.status().message().find("'adamw'"), std::string::npos) << r.status();
        EXPECT_NE(r.status().message().find("'" + mode + "'"), std::string::npos) << r.status();
      });
      // Without the states the params load.
      load.load_options.load_optimizer_states = false;
      RunThreads(1, [&](int, Communicator* comm) {
        auto r = TrainMlp(adam_into_other ? c : adam, comm, load);
        EXPECT_TRUE(r.ok()) << r.status();
      });
    }
  }
}

// One fp32 moment per param (Adam: two), measured (zero_stats) against the
// formula and the estimator.
TEST(OptimizerKindsMemory, StateBytesPerParamMatchFormulaAndEstimate) {
  for (const std::string mode : {"", "lion", "adagrad", "sgd"}) {
    Config c = OptimizerConfig(mode, 2, DType::kBF16);
    const int64_t moments = mode.empty() ? 2 : 1;
    MlpSpec spec;
    spec.steps = 1;
    std::vector<MlpResult> all = TrainAll(c, 3, spec);
    const EngineStats& s = all[0].stats;
    const int64_t owned = s.padded_numel / 3;
    EXPECT_EQ(s.master_bytes, owned * 4) << mode;
    EXPECT_EQ(s.optimizer_bytes, owned * 4 * moments) << mode;
    std::vector<EstimateParam> params;
    for (const std::vector<float>& p : all[0].params) {
      EstimateParam ep;
      ep.numel = static_cast<int64_t>(p.size());
      params.push_back(ep);
    }
    params[0].trainable = false;  // the frozen embedding
    auto est = EstimateMemory(params, c, {3, 1, false});
    ASSERT_TRUE(est.ok()) << est.status();
    EXPECT_EQ(est->optimizer_bytes, s.optimizer_bytes) << mode;
  }
}

TEST(OptimizerKindsConfig, DeepSpeedNamesAndDefaults) {
  auto lion = ParseDsConfig(R"({"train_batch_size": 8, "optimizer": {"type": "Lion",
      "params": {"lr": 1e-4, "betas": [0.95, 0.98], "weight_decay": 0.1}}})");
  ASSERT_TRUE(lion.ok()) << lion.status();
  EXPECT_EQ(lion->optimizer, OptimizerType::kLion);
  EXPECT_EQ(lion->lr, 1e-4);
  EXPECT_EQ(lion->beta1, 0.95);
  EXPECT_EQ(lion->beta2, 0.98);
  EXPECT_EQ(lion->weight_decay, 0.1);
  auto adagrad = ParseDsConfig(R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad"}})");
  ASSERT_TRUE(adagrad.ok()) << adagrad.status();
  EXPECT_EQ(adagrad->optimizer, OptimizerType::kAdagrad);
  EXPECT_EQ(adagrad->lr, 1e-2);  // DeepSpeedCPUAdagrad's defaults
  EXPECT_EQ(adagrad->eps, 1e-10);
  auto eps = ParseDsConfig(R"({"train_batch_size": 8, "optimizer": {"type": "adagrad",
      "params": {"eps": 1e-8, "weight_decay": 0.01}}})");
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ(eps->eps, 1e-8);
  EXPECT_EQ(eps->weight_decay, 0.01);
  // Adam's own keys are not Lion's.
  auto bad = ParseDsConfig(R"({"train_batch_size": 8, "optimizer": {"type": "Lion",
      "params": {"eps": 1e-8}}})");
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace testing
}  // namespace zero
