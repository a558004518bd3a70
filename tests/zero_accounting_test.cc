// Measured bytes and traffic against the ZeRO formulas (docs/ARCHITECTURE.md,
// "Memory and traffic") and the stage-3 live-parameter budget.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/comm/thread_communicator.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

Config Cfg(int stage, DType dtype) {
  Config c;
  c.stage = stage;
  c.dtype = dtype;
  c.lr = 1e-2;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 30;
  c.initial_scale_power = 8;
  c.reduce_bucket_size = 2000;
  c.stage3_param_persistence_threshold = 0;  // the formulas: nothing whole
  return c;
}

MlpSpec BigSpec(int steps) {
  MlpSpec s;
  s.hidden = 500;  // Psi = 6003: padding stays a few percent at W = 4
  s.steps = steps;
  return s;
}

class AccountingTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// Model states per rank: 2Psi + 2Psi + 12Psi split per stage (fp16); with
// fp32 working copies the 2s become 4s and the 12 an 8: the fp32 master is
// the working copy's owned range (DeviceStateStore::Allocate), so only m and
// v are the optimizer's own. Measured exactly on padded Psi.
TEST_P(AccountingTest, MemoryMatchesZeroFormula) {
  const int stage = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const DType dtype = static_cast<DType>(std::get<2>(GetParam()));
  auto res = TrainAll(Cfg(stage, dtype), world, BigSpec(1));
  const int64_t es = DTypeSize(dtype);
  for (int r = 0; r < world; ++r) {
    const EngineStats& s = res[r].stats;
    const int64_t psi = s.trainable_numel, P = s.padded_numel;
    EXPECT_EQ(psi, 6003);
    EXPECT_LE(P - psi, world * 64) << "padding is under one alignment unit";
    const int64_t W = world;
    int64_t params = es * P, grads = es * P, optim = (dtype == DType::kF32 ? 8 : 12) * P;
    if (stage >= 1) optim /= W;
    if (stage >= 2) grads /= W;
    if (stage >= 3) params /= W;
    EXPECT_EQ(s.param_bytes, params) << "rank " << r;
    EXPECT_EQ(s.grad_bytes, grads) << "rank " << r;
    EXPECT_EQ(s.master_bytes + s.optimizer_bytes, optim) << "rank " << r;
  }
}

// Elements sent per rank in one step: 2Psi(W-1)/W for stages 0-2 and
// 3Psi(W-1)/W for stage 3, up to padding.
TEST_P(AccountingTest, TrafficMatchesZeroFormula) {
  const int stage = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const DType dtype = static_cast<DType>(std::get<2>(GetParam()));
  auto res = TrainAll(Cfg(stage, dtype), world, BigSpec(1));
  for (int r = 0; r < world; ++r) {
    const EngineStats& s = res[r].stats;
    const double psi = static_cast<double>(s.trainable_numel);
    const double W = world;
    const double expected = (stage == 3 ? 3.0 : 2.0) * psi * (W - 1) / W;
    const double sent = static_cast<double>(
        s.sent[static_cast<int>(CollectiveKind::kAllGather)] +
        s.sent[static_cast<int>(CollectiveKind::kReduceScatter)] +
        s.sent[static_cast<int>(CollectiveKind::kAllReduce)]);
    const double padding = static_cast<double>(s.padded_numel - s.trainable_numel);
    EXPECT_NEAR(sent, expected, 3 * padding + 3 * W) << "rank " << r;
    // Scalars (norm/overflow all-reduce, finalize check, final read) apart.
    EXPECT_LT(s.sent[static_cast<int>(CollectiveKind::kControl)], 64 + 2 * psi);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Stages, AccountingTest,
    ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(2, 3, 4),
                       ::testing::Values(0, 1)),
    [](const ::testing::TestParamInfo<AccountingTest::ParamType>& i) {
      return "stage" + std::to_string(std::get<0>(i.param)) + "_world" +
             std::to_string(std::get<1>(i.param)) + "_" +
             DTypeName(static_cast<DType>(std::get<2>(i.param)));
    });

// Stage 1's buffers against their formula (docs/ARCHITECTURE.md, "Buffers
// per rank"): two buckets, the fp32 pack (+ its 2-byte send and receive for
// fp16/bf16 reductions), the gradient buffer of the param larger than a
// bucket (W1, 4000 elements), and the fp32 gradient scratch of the owned
// range: none for an fp32 model whose reduce-scatter packs (its target is
// the owned range of the gradient itself), owned x 4 where it reads the
// gradient unpacked (a bucket of the whole model) and for fp16/bf16. Both
// paths give the same bits, with accumulation (the owned range is zeroed
// for the next one), and fp32 stays within 1e-5 of single-rank stage 0.
class Stage1BufferTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Stage1BufferTest, BuffersMatchTheirFormula) {
  const int world = std::get<0>(GetParam());
  const DType dtype = static_cast<DType>(std::get<1>(GetParam()));
  const int64_t es = DTypeSize(dtype);
  std::vector<MlpResult> runs[2];
  for (int whole = 0; whole < 2; ++whole) {
    Config c = Cfg(1, dtype);
    c.gradient_accumulation_steps = 2;
    if (whole) c.reduce_bucket_size = 1 << 20;
    runs[whole] = TrainAll(c, world, BigSpec(3));
    for (int r = 0; r < world; ++r) {
      const EngineStats& s = runs[whole][r].stats;
      const int64_t P = s.padded_numel, W = world;
      const int64_t cap = std::min<int64_t>(c.reduce_bucket_size, P);
      int64_t want = 2 * cap * es + cap * 4;
      if (dtype != DType::kF32) want += cap * 2 * 2;
      if (cap < 4000) want += 4000 * es;
      // The unpacked reduce-scatter: fp32 and the shard within one chunk.
      const bool unpacked = dtype == DType::kF32 && P / W <= cap / W;
      EXPECT_EQ(unpacked, whole == 1 && dtype == DType::kF32);
      if (dtype != DType::kF32 || unpacked) want += P / W * 4;
      EXPECT_EQ(s.buffer_bytes, want) << "rank " << r << (whole ? " whole bucket" : " packed");
      EXPECT_EQ(s.global_step, 3);
    }
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(MaxRelDiff(runs[0][r], runs[1][r]), 0.0) << "rank " << r;
  }
  if (dtype == DType::kF32) {
    Config one = Cfg(0, dtype);
    one.gradient_accumulation_steps = 2;
    EXPECT_LE(MaxRelDiff(runs[0][0], TrainAt(one, 1, BigSpec(3))), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, Stage1BufferTest,
    ::testing::Combine(::testing::Values(2, 3, 4),
                       ::testing::Values(static_cast<int>(DType::kF32),
                                         static_cast<int>(DType::kBF16))),
    [](const ::testing::TestParamInfo<Stage1BufferTest::ParamType>& i) {
      return "world" + std::to_string(std::get<0>(i.param)) + "_" +
             DTypeName(static_cast<DType>(std::get<1>(i.param)));
    });

// reduce_scatter false: the gradient reduction is an all-reduce, counted
// as 2n(W-1)/W, in place of the reduce-scatter's n(W-1)/W; the all-gathers
// are unchanged. A step sends 3Psi(W-1)/W at stages 1-2, 4Psi(W-1)/W at 3.
class AllReduceTrafficTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(AllReduceTrafficTest, AllReduceReplacesReduceScatter) {
  const int stage = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const DType dtype = static_cast<DType>(std::get<2>(GetParam()));
  Config c = Cfg(stage, dtype);
  c.reduce_scatter = false;
  auto res = TrainAll(c, world, BigSpec(1));
  for (int r = 0; r < world; ++r) {
    const EngineStats& s = res[r].stats;
    const double psi = static_cast<double>(s.trainable_numel);
    const double W = world;
    const double padding = static_cast<double>(s.padded_numel - s.trainable_numel);
    const double gathers = (stage == 3 ? 2.0 : 1.0) * psi * (W - 1) / W;
    EXPECT_EQ(s.sent[static_cast<int>(CollectiveKind::kReduceScatter)], 0) << "rank " << r;
    EXPECT_NEAR(static_cast<double>(s.sent[static_cast<int>(CollectiveKind::kAllReduce)]),
                2.0 * psi * (W - 1) / W, 2 * padding + 3 * W) << "rank " << r;
    EXPECT_NEAR(static_cast<double>(s.sent[static_cast<int>(CollectiveKind::kAllGather)]),
                gathers, 2 * padding + 3 * W) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Stages123, AllReduceTrafficTest,
    ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(2, 3, 4),
                       ::testing::Values(0, 1)),
    [](const ::testing::TestParamInfo<AllReduceTrafficTest::ParamType>& i) {
      return "stage" + std::to_string(std::get<0>(i.param)) + "_world" +
             std::to_string(std::get<1>(i.param)) + "_" +
             DTypeName(static_cast<DType>(std::get<2>(i.param)));
    });

TEST(Stage3BudgetTest, TrainsUnderABudgetSmallerThanTheModel) {
  MlpSpec spec;
  spec.hidden = 60;  // fc1.weight 480, fc2.weight 180, Psi = 483+240 ~ 723
  Config c = Cfg(3, DType::kF32);
  c.overlap_comm = 1;  // prefetch on
  c.stage3_prefetch_bucket_size = 200;
  c.stage3_max_live_parameters = 500;  // < Psi, >= the largest param
  auto limited = TrainAll(c, 3, spec);
  Config free_cfg = Cfg(0, DType::kF32);
  auto ref = TrainAll(free_cfg, 1, spec);
  for (int r = 0; r < 3; ++r) {
    EXPECT_LE(limited[r].stats.live_gathered_high_water, 500 * 4) << "rank " << r;
    EXPECT_GT(limited[r].stats.live_gathered_high_water, 0);
    EXPECT_LE(MaxRelDiff(limited[r], ref[0]), 1e-6);
  }
}

TEST(Stage3BudgetTest, ParamLargerThanBudgetIsAClearError) {
  MlpSpec spec;
  spec.hidden = 60;
  Config c = Cfg(3, DType::kF32);
  c.stage3_max_live_parameters = 100;  // fc1.weight has 480 elements
  std::vector<absl::Status> st(2);
  RunThreads(2, [&](int rank, Communicator* comm) { st[rank] = TrainMlp(c, comm, spec).status(); });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kResourceExhausted) << st[r];
    EXPECT_NE(st[r].message().find("stage3_max_live_parameters"), std::string::npos) << st[r];
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
