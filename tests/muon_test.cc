// Muon (DeepSpeed's MuonWithAuxAdam, docs/DEEPSPEED_COMPAT.md): the MLP's
// hidden matrices on Muon, its biases on AdamW, against the double-precision
// reference of tests/testing/muon_reference.h step by step, at stages 0-3,
// fp32 and bf16, worlds 1 to 5 (owner-rank Newton-Schulz, docs/
// ARCHITECTURE.md, "Muon"); with the state in memory, in host memory beside
// an off-host device (ZeRO-Offload) and on NVMe; the owner assignment; a
// checkpoint resharded from 3 ranks to 1 and refused by AdamW naming both;
// the param selection rule; the DeepSpeed config names.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "core/common/status_macros.h"
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/engine/param_registry.h"
#include "core/optim/muon_owners.h"
#include "core/optim/newton_schulz.h"
#include "tests/testing/fresh_dir.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/muon_matrices.h"
#include "tests/testing/muon_reference.h"
#include "tests/testing/optimizer_sweep.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

Config MuonConfig(int stage, DType dtype) {
  Config c = SmallMlpConfig(stage, dtype);
  c.sub_group_size = 96;  // several groups: matrices in different groups and pieces
  ApplyStepMode("muon", &c);
  return c;
}

class MuonReferenceTest : public ::testing::TestWithParam<SweepCase> {};

TEST_P(MuonReferenceTest, MatchesDoublePrecisionReferenceStepByStep) {
  const SweepCase& s = GetParam();
  const Config c = MuonConfig(s.stage, s.dtype);
  ExpectMatchesReferenceStepByStep(c, s.world, SweepTolerance(s.dtype), "");
}

INSTANTIATE_TEST_SUITE_P(StagesWorldsDtypes, MuonReferenceTest,
                         ::testing::ValuesIn(StagesWorldsDtypes()),
                         [](const ::testing::TestParamInfo<SweepCase>& i) {
                           return SweepCaseName(i.param);
                         });

// Two matrices over 2, 4 and 5 ranks: some ranks own none, slices straddle
// shards; gradient accumulation and clipping fold into the momentum.
TEST(MuonWorlds, TwoToFiveRanksMatchReference) {
  for (int world : {2, 4, 5}) {
    for (int stage : {1, 2, 3}) {
      Config c = MuonConfig(stage, DType::kF32);
      c.gradient_accumulation_steps = 2;
      c.gradient_clipping = 0.05;
      MlpSpec spec;
      spec.steps = 4;
      spec.global_batch = 60;  // rows split evenly over 2, 4 and 5 ranks
      EXPECT_LE(MaxRelDiff(TrainAt(c, world, spec), TrainMlpReference(c, spec)), 1e-5)
          << "world " << world << " stage " << stage;
    }
  }
}

// fp16 with its loss scale: the factor unscales before the momentum; an
// overflow on one rank skips the step everywhere before the Muon phase, so
// the momentum does not move (the reference skips that step whole).
TEST(MuonWorlds, Fp16OverflowSkipsWithoutMovingTheMomentum) {
  for (int stage : {1, 3}) {
    const Config c = MuonConfig(stage, DType::kF16);
    MlpSpec spec;
    spec.inf_step = 3;
    spec.inf_rank = 2;
    const MlpResult got = TrainAt(c, 3, spec);
    ASSERT_EQ(got.steps.size(), 10u);
    EXPECT_TRUE(got.steps[3].skipped);
    MlpSpec ref_spec = spec;
    ref_spec.inf_rank = 0;
    EXPECT_LE(MaxRelDiff(got, TrainMlpReference(c, ref_spec)), 2e-3) << "stage " << stage;
  }
}

// Offload moves the state, not the arithmetic.
TEST(MuonOffload, CpuAndNvmeOffloadGiveTheInMemoryBits) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " " + DTypeName(t));
      const Config c = MuonConfig(stage, t);
      const MlpResult memory = TrainAt(c, 3, MlpSpec());
      EXPECT_LE(MaxRelDiff(memory, TrainMlpReference(c, MlpSpec())), SweepTolerance(t));
      ExpectNvmeOffloadGivesTheBits(c, memory, "muon_nvme");
      ExpectCpuOffloadGivesTheOnDeviceBits(c, memory, SweepTolerance(t));
    }
  }
}

// Each matrix has exactly one owner, and the most-loaded rank carries at
// most the mean plus the largest matrix (the greedy largest-first bound);
// with no more matrices than ranks, no rank owns two.
TEST(MuonOwners, EachMatrixOneOwnerBalancedWithinGreedyBound) {
  const std::vector<std::vector<int64_t>> sets = {
      {100}, {64, 64, 64}, {300, 20, 20, 20, 20, 20, 7}, {5, 9, 13, 200, 1, 1, 50, 50, 49},
      {1000, 999, 998, 3, 2}, {16, 16, 16, 16, 16, 16, 16}};
  for (int world = 2; world <= 5; ++world) {
    for (const auto& cost : sets) {
      const std::vector<int> owner = AssignMuonOwners(cost, world);
      ASSERT_EQ(owner.size(), cost.size());
      std::vector<int64_t> load(world, 0);
      for (size_t i = 0; i < cost.size(); ++i) {
        ASSERT_GE(owner[i], 0);
        ASSERT_LT(owner[i], world);
        load[owner[i]] += cost[i];
      }
      const int64_t total = std::accumulate(cost.begin(), cost.end(), int64_t{0});
      const int64_t largest = *std::max_element(cost.begin(), cost.end());
      const int64_t most = *std::max_element(load.begin(), load.end());
      EXPECT_LE(most * world, total + largest * world) << "world " << world;
      if (static_cast<int>(cost.size()) <= world) {
        std::vector<int> sorted = owner;
        std::sort(sorted.begin(), sorted.end());
        EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
      }
      // Largest-first: the largest matrix goes to rank 0.
      EXPECT_EQ(owner[std::max_element(cost.begin(), cost.end()) - cost.begin()], 0);
    }
  }
}

// Six matrices (and two biases) over 2 to 5 ranks (tests/testing/
// muon_matrices.h): owners hold several matrices, slices straddle shards and
// groups, some ranks own none; the exchange reassembles and returns every
// slice in place.
TEST(MuonOwners, ExchangeAtWorldsTwoToFiveEqualsLocalOrthogonalisation) {
  Config local = MuonConfig(0, DType::kF32);
  local.sub_group_size = 150;  // matrices in several groups
  std::vector<std::vector<float>> ref;
  RunThreads(1, [&](int, Communicator* comm) {
    auto r = TrainMatrices(local, comm);
    ASSERT_TRUE(r.ok()) << r.status();
    ref = *r;
  });
  ASSERT_FALSE(ref.empty());
  for (int world = 2; world <= 5; ++world) {
    for (int stage = 1; stage <= 3; ++stage) {
      Config c = local;
      c.stage = stage;
      RunThreads(world, [&](int rank, Communicator* comm) {
        auto r = TrainMatrices(c, comm);
        ASSERT_TRUE(r.ok()) << r.status();
        const double rel = MatricesRelDiff(*r, ref);
        // Averaging W equal gradients is exact at W = 2 and 4; at 3 and 5 it
        // rounds, and Newton-Schulz amplifies a small singular value's
        // perturbation up to 3.4445^5 times.
        const double tol = (world == 2 || world == 4) ? 0.0 : 1e-4;
        EXPECT_LE(rel, tol) << "world " << world << " stage " << stage << " rank " << rank;
      });
    }
  }
}

// The engine's fp32 Newton-Schulz against the double one, tall and wide,
// and the direction is near-orthogonal: its singular values near 1 (the
// quintic's band, roughly 0.7-1.2), so U U^T has a diagonal in that band.
TEST(MuonNewtonSchulz, MatchesDoubleReferenceTallAndWide) {
  uint64_t s = 7;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) / 9007199254740992.0 - 0.5;
  };
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{6, 17}, {17, 6}, {9, 9}}) {
    std::vector<double> g(rows * cols);
    for (double& v : g) v = static_cast<float>(next());
    std::vector<float> f(g.begin(), g.end());
    NewtonSchulzOrthogonalize(f.data(), rows, cols, 5);
    const std::vector<double> ref = MuonReferenceDirection(g, rows, cols, 5);
    double diff = 0, mag = 0;
    for (size_t k = 0; k < ref.size(); ++k) {
      diff = std::max(diff, std::fabs(f[k] - ref[k]));
      mag = std::max(mag, std::fabs(ref[k]));
    }
    EXPECT_LE(diff, 1e-5 * mag) << rows << "x" << cols;
    const int64_t n = std::min(rows, cols);
    const double scale = rows > cols ? std::sqrt(static_cast<double>(rows) / cols) : 1.0;
    for (int64_t i = 0; i < n; ++i) {  // diagonal of the small Gram matrix
      double d = 0;
      for (int64_t k = 0; k < std::max(rows, cols); ++k) {
        const double v = rows > cols ? ref[k * cols + i] : ref[i * cols + k];
        d += v * v / (scale * scale);
      }
      EXPECT_GT(d, 0.4) << rows << "x" << cols;
      EXPECT_LT(d, 1.6) << rows << "x" << cols;
    }
  }
}

// Muon's momentum is a checkpointed moment: saved at 3 ranks, resumed at 1
// on another stage, the same end as training through. AdamW's checkpoint
// into Muon and the reverse: refused, naming both.
TEST(MuonCheckpoint, ReshardsAndRefusesAnotherOptimizer) {
  const Config c = MuonConfig(2, DType::kF32);
  MlpSpec spec;
  spec.ckpt_dir = FreshDir("muon_ckpt");
  spec.save_after = 4;
  const MlpResult through = TrainAt(c, 3, spec);
  EXPECT_LE(MaxRelDiff(through, TrainMlpReference(c, spec)), 1e-5);
  MlpSpec resume;
  resume.resume_dir = spec.ckpt_dir;
  resume.resume_tag = "mid";
  Config one = c;
  one.stage = 3;
  EXPECT_LE(MaxRelDiff(TrainAt(one, 1, resume), through), 1e-6);
  // Without the momentum the resumed run differs: it was carried.
  resume.load_options.load_optimizer_states = false;
  EXPECT_GT(MaxRelDiff(TrainAt(one, 1, resume), through), 1e-4);

  const Config adam = SmallMlpConfig(2, DType::kF32);
  for (const bool adam_into_muon : {true, false}) {
    MlpSpec save;
    save.ckpt_dir = FreshDir("muon_mixed");
    save.steps = 2;
    save.final_tag = "end";
    (void)TrainAt(adam_into_muon ? adam : c, 1, save);
    MlpSpec load;
    load.resume_dir = save.ckpt_dir;
    load.resume_tag = "end";
    RunThreads(1, [&](int, Communicator* comm) {
      auto r = TrainMlp(adam_into_muon ? c : adam, comm, load);
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find("'adamw'"), std::string::npos) << r.status();
      EXPECT_NE(r.status().message().find("'muon'"), std::string::npos) << r.status();
    });
  }
}

// DeepSpeed's rule (at least 2-D, no "embed" or "lm_head" in the name)
// unless the caller says; a 1-D param marked for Muon is refused by name.
TEST(MuonSelection, DefaultRuleAndExplicitFlag) {
  EXPECT_TRUE(MuonDefault("h.0.attn.c_proj.weight", {64, 64}));
  EXPECT_TRUE(MuonDefault("conv", {8, 3, 3, 3}));
  EXPECT_FALSE(MuonDefault("h.0.attn.c_proj.bias", {64}));
  EXPECT_FALSE(MuonDefault("transformer.wte.Embedding", {100, 64}));
  EXPECT_FALSE(MuonDefault("wpe_embed", {100, 64}));
  EXPECT_FALSE(MuonDefault("LM_HEAD.weight", {100, 64}));
  ParamRegistry reg(DType::kF32);
  ParamSpec bias;
  bias.name = "fc.bias";
  bias.shape = {5};
  bias.use_muon = 1;
  auto r = reg.Register(bias);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'fc.bias'"), std::string::npos) << r.status();
  ParamSpec head;
  head.name = "lm_head.weight";
  head.shape = {5, 4};
  head.use_muon = 1;
  ASSERT_TRUE(reg.Register(head).ok());
  EXPECT_TRUE(reg.at(0).use_muon);
  ParamSpec off;
  off.name = "fc.weight";
  off.shape = {5, 4};
  off.use_muon = 0;
  ASSERT_TRUE(reg.Register(off).ok());
  EXPECT_FALSE(reg.at(1).use_muon);
}

// One step from the same params: the matrices move unlike AdamW's, the
// biases exactly as AdamW's at adam_lr.
TEST(MuonSelection, MatricesOnMuonBiasesOnAdamW) {
  const Config c = MuonConfig(2, DType::kF32);
  Config adamw = c;
  adamw.optimizer = OptimizerType::kAdamW;
  adamw.lr = c.adam_lr;
  MlpSpec spec;
  spec.steps = 1;
  const MlpResult muon = TrainAt(c, 3, spec);
  const MlpResult plain = TrainAt(adamw, 3, spec);
  EXPECT_GT(MaxRelDiff(muon, plain), 1e-3);  // Muon moved the matrices differently
  // The biases' AdamW half is AdamW: bit for bit AdamW's biases.
  EXPECT_EQ(muon.params[2], plain.params[2]);
  EXPECT_EQ(muon.params[4], plain.params[4]);
}

TEST(MuonConfig, DeepSpeedNamesAndDefaults) {
  auto d = ParseDsConfig(R"({"train_batch_size": 8, "optimizer": {"type": "Muon"}})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->optimizer, OptimizerType::kMuon);
  EXPECT_EQ(d->muon_momentum, 0.95);
  EXPECT_TRUE(d->muon_nesterov);
  EXPECT_EQ(d->muon_ns_steps, 5);
  auto c = ParseDsConfig(R"({"train_batch_size": 8, "optimizer": {"type": "muon",
      "params": {"lr": 1e-3, "muon_lr": 0.05, "adam_lr": 3e-4, "momentum": 0.9,
                 "nesterov": false, "ns_steps": 6, "ns_method": "standard",
                 "weight_decay": 0.1, "betas": [0.9, 0.95], "eps": 1e-10}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->muon_lr, 0.05);
  EXPECT_EQ(c->adam_lr, 3e-4);
  EXPECT_EQ(c->muon_momentum, 0.9);
  EXPECT_FALSE(c->muon_nesterov);
  EXPECT_EQ(c->muon_ns_steps, 6);
  EXPECT_EQ(c->beta2, 0.95);
  EXPECT_EQ(c->eps, 1e-10);
  auto per_head = ParseDsConfig(R"({"train_batch_size": 8, "optimizer": {"type": "muon",
      "params": {"per_head_muon": true}}})");
  ASSERT_FALSE(per_head.ok());
  EXPECT_NE(per_head.status().message().find("per_head_muon"), std::string::npos);
}

}  // namespace
}  // namespace testing
}  // namespace zero
