// DeepSpeed keys that shape the gradient reduction and the publishing
// all-gather (docs/DEEPSPEED_COMPAT.md, docs/ARCHITECTURE.md "One training
// step"): reduce_scatter false, allgather_bucket_size, prescale_gradients and
// gradient_predivide_factor, and the sizes taken from the model when a
// ds_config names none.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/communicator.h"
#include "core/common/status_macros.h"
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

int64_t Sent(const EngineStats& s, CollectiveKind k) { return s.sent[static_cast<int>(k)]; }

double Tolerance(DType t) {
  switch (t) {
    case DType::kF32: return 1e-6;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 4e-2;
  }
  return 0;
}

// ---- reduce_scatter: false ------------------------------------------------

class ReduceScatterOffTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// All-reduce then keep the own shard: the same bits as reduce-scatter (the
// thread communicator sums in rank order either way), and the same result
// as single-rank stage 0.
TEST_P(ReduceScatterOffTest, TrainsLikeReduceScatter) {
  const int stage = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const DType dtype = static_cast<DType>(std::get<2>(GetParam()));
  Config rs = SmallMlpConfig(stage, dtype);
  Config ar = rs;
  ar.reduce_scatter = false;
  MlpSpec spec;
  MlpResult a = TrainAt(ar, world, spec);
  MlpResult b = TrainAt(rs, world, spec);
  EXPECT_EQ(MaxRelDiff(a, b), 0.0);
  Config single = rs;
  single.stage = 0;
  EXPECT_LE(MaxRelDiff(a, TrainAt(single, 1, spec)), Tolerance(dtype));
  EXPECT_EQ(Sent(a.stats, CollectiveKind::kReduceScatter), 0);
  EXPECT_GT(Sent(a.stats, CollectiveKind::kAllReduce), 0);
  ASSERT_EQ(a.steps.size(), 10u);
}

INSTANTIATE_TEST_SUITE_P(
    Stages123, ReduceScatterOffTest,
    ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(2, 3, 4),
                       ::testing::Values(0, 1, 2)),
    [](const ::testing::TestParamInfo<ReduceScatterOffTest::ParamType>& i) {
      return "stage" + std::to_string(std::get<0>(i.param)) + "_world" +
             std::to_string(std::get<1>(i.param)) + "_" +
             DTypeName(static_cast<DType>(std::get<2>(i.param)));
    });

TEST(ReduceScatterOff, AccumulationOverlapAndOverflowAsWithReduceScatter) {
  for (int stage = 1; stage <= 3; ++stage) {
    Config rs = SmallMlpConfig(stage, DType::kF16);
    rs.gradient_accumulation_steps = 2;
    rs.overlap_comm = 1;
    rs.reduce_bucket_size = 64;
    Config ar = rs;
    ar.reduce_scatter = false;
    MlpSpec spec;
    spec.inf_step = 3;
    spec.inf_rank = 1;
    MlpResult a = TrainAt(ar, 3, spec);
    MlpResult b = TrainAt(rs, 3, spec);
    EXPECT_EQ(MaxRelDiff(a, b), 0.0) << "stage " << stage;
    ASSERT_EQ(a.steps.size(), 10u);
    EXPECT_TRUE(a.steps[3].skipped) << "stage " << stage;
  }
}

// ---- allgather_bucket_size -----------------------------------------------

// Stages 1-2 publish the working copy in all-gathers of at most
// allgather_bucket_size elements: more calls as it shrinks, the same
// elements sent, the same bits.
TEST(AllgatherBucketSize, ChunksThePublishingAllGather) {
  for (int stage = 1; stage <= 2; ++stage) {
    for (int world : {2, 3, 4}) {
      for (DType t : {DType::kF32, DType::kBF16}) {
        Config c = SmallMlpConfig(stage, t);
        MlpSpec spec;
        spec.steps = 4;
        MlpResult whole = TrainAt(c, world, spec);
        const int64_t shard = whole.stats.padded_numel / world;  // one group
        int64_t prev_calls = whole.stats.collective_calls;
        for (int64_t bucket : {1000, 256, 100, 37, 3}) {
          c.allgather_bucket_size = bucket;
          MlpResult got = TrainAt(c, world, spec);
          const std::string what =
              absl::StrCat("stage ", stage, " world ", world, " ", DTypeName(t), " bucket ", bucket);
          EXPECT_EQ(MaxRelDiff(got, whole), 0.0) << what;
          EXPECT_EQ(Sent(got.stats, CollectiveKind::kAllGather),
                    Sent(whole.stats, CollectiveKind::kAllGather)) << what;
          const int64_t chunk = std::max<int64_t>(1, bucket / world);
          const int64_t per_step = (shard + chunk - 1) / chunk;
          EXPECT_EQ(got.stats.collective_calls - whole.stats.collective_calls,
                    spec.steps * (per_step - 1)) << what;
          EXPECT_GE(got.stats.collective_calls, prev_calls) << what;
          prev_calls = got.stats.collective_calls;
          // The staging buffer for chunks, only when chunked.
          const int64_t staging = per_step > 1 ? chunk * world * DTypeSize(t) : 0;
          EXPECT_EQ(got.stats.buffer_bytes - whole.stats.buffer_bytes, staging) << what;
        }
        EXPECT_GT(prev_calls, whole.stats.collective_calls);
      }
    }
  }
}

// ---- prescale_gradients, gradient_predivide_factor -------------------------

// DeepSpeed's averaging: prescale divides by the world before the sum;
// otherwise 1/factor before and factor/world after. In fp32 the result is
// the same up to rounding, and the rounding shows that the scaling ran.
TEST(GradientScaling, SameTrainingUpToRounding) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (bool reduce_scatter : {true, false}) {
        Config base = SmallMlpConfig(stage, t);
        base.reduce_scatter = reduce_scatter;
        MlpSpec spec;
        MlpResult ref = TrainAt(base, 3, spec);
        Config pre = base;
        pre.prescale_gradients = true;
        Config div = base;
        div.gradient_predivide_factor = 3.0;
        Config both = div;  // prescale wins; the factor is not read
        both.prescale_gradients = true;
        const std::string what = absl::StrCat("stage ", stage, " ", DTypeName(t),
                                              reduce_scatter ? " reduce-scatter" : " all-reduce");
        MlpResult p = TrainAt(pre, 3, spec);
        MlpResult d = TrainAt(div, 3, spec);
        EXPECT_LE(MaxRelDiff(p, ref), Tolerance(t)) << what;
        EXPECT_LE(MaxRelDiff(d, ref), Tolerance(t)) << what;
        EXPECT_EQ(MaxRelDiff(TrainAt(both, 3, spec), p), 0.0) << what;
        if (t == DType::kF32) {
          // x/3 summed is not the sum times 1/3 in the last bit somewhere.
          EXPECT_GT(MaxRelDiff(p, ref), 0.0) << what;
          EXPECT_GT(MaxRelDiff(d, ref), 0.0) << what;
        }
      }
    }
  }
}

// fp16 gradients each rank can hold whose sum over the ranks cannot
// (4 x 30000 > 65504): where DeepSpeed's fp16 communication needs
// prescale_gradients or a predivide factor to avoid an overflow. With
// "communication_data_type": "fp32" every setting gives the same finite
// average and no skipped step. With the default (an fp16 model reduces in
// fp16, as in DeepSpeed) the plain sum overflows and every rank skips the
// step, while prescaling (7500 x 4) and a predivide factor of 2 (15000 x 4
// = 60000) keep the sum in range and give the same average exactly.
TEST(GradientScaling, Fp16SumBeyondTheRange) {
  constexpr int kWorld = 4;
  constexpr int64_t kN = 64;
  for (bool fp32_comm : {true, false}) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int mode = 0; mode < 3; ++mode) {
      Config c;
      c.stage = stage;
      c.dtype = DType::kF16;
      if (fp32_comm) c.communication_data_type = DType::kF32;
      c.loss_scale = 1.0;  // static: gradients as handed in
      c.optimizer = OptimizerType::kSgd;
      c.lr = 1e-5;
      c.steps_per_print = 0;
      c.comm_timeout_seconds = 30;
      c.prescale_gradients = mode == 1;
      c.gradient_predivide_factor = mode == 2 ? 2.0 : 1.0;
      std::vector<float> master[kWorld];
      std::vector<StepInfo> info(kWorld);
      std::mutex mu;
      RunThreads(kWorld, [&](int rank, Communicator* comm) {
        auto e = Engine::Create(c, comm);
        ASSERT_TRUE(e.ok()) << e.status();
        ParamSpec ps;
        ps.name = "w";
        ps.shape = {8, 8};
        ps.dtype = DType::kF16;
        ASSERT_TRUE((*e)->RegisterParam(ps).ok());
        ASSERT_TRUE((*e)->Finalize().ok());
        auto buf = (*e)->GradBuffer(0);
        ASSERT_TRUE(buf.ok()) << buf.status();
        const uint16_t h30000 = 0x7753;  // 30000 in fp16
        std::vector<uint16_t> g(kN, h30000);
        (*e)->device()->Copy(*buf, g.data(), kN * 2);
        ASSERT_TRUE((*e)->GradReady(0).ok());
        auto st = (*e)->Step();
        ASSERT_TRUE(st.ok()) << st.status();
        std::vector<float> m(kN);
        ASSERT_TRUE((*e)->ReadMaster(0, m.data()).ok());
        std::lock_guard<std::mutex> l(mu);
        info[rank] = *st;
        master[rank] = m;
      });
      const std::string what =
          absl::StrCat("stage ", stage, " mode ", mode, fp32_comm ? " fp32" : " fp16", " reduction");
      for (int r = 0; r < kWorld; ++r) {
        ASSERT_EQ(master[r].size(), static_cast<size_t>(kN));
        if (!fp32_comm && mode == 0) {
          EXPECT_TRUE(info[r].skipped) << what << ": the fp16 sum 120000 should overflow";
          for (float v : master[r]) EXPECT_EQ(v, 0.0f) << what;  // not updated
          continue;
        }
        EXPECT_FALSE(info[r].skipped) << what;
        EXPECT_EQ(info[r].grad_norm, 30000.0 * 8) << what;  // the average, 30000
        for (float v : master[r]) EXPECT_FLOAT_EQ(v, -0.3f) << what;
      }
    }
  }
  }
}

// ---- sizes from the model ---------------------------------------------------

constexpr int kHidden = 32;
constexpr int kLayers = 4;

// kLayers x (kHidden x kHidden weight, kHidden bias): Psi = 4224, H^2 = 1024.
// With vocab > 0 an embedding [vocab, kHidden] comes first.
absl::StatusOr<std::unique_ptr<Engine>> LayeredEngine(const Config& c, Communicator* comm,
                                                      bool matrices = true, int64_t vocab = 0) {
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Create(c, comm));
  if (vocab > 0) {
    ParamSpec w;
    w.name = "embed.weight";
    w.shape = {vocab, kHidden};
    w.dtype = c.dtype;
    RETURN_IF_ERROR(e->RegisterParam(w).status());
  }
  for (int l = 0; l < kLayers; ++l) {
    ParamSpec w;
    w.name = absl::StrCat("layer", l, ".weight");
    w.shape = matrices ? std::vector<int64_t>{kHidden, kHidden}
                       : std::vector<int64_t>{kHidden * kHidden};
    w.dtype = c.dtype;
    RETURN_IF_ERROR(e->RegisterParam(w).status());
    ParamSpec b;
    b.name = absl::StrCat("layer", l, ".bias");
    b.shape = {kHidden};
    b.dtype = c.dtype;
    RETURN_IF_ERROR(e->RegisterParam(b).status());
  }
  RETURN_IF_ERROR(e->Finalize());
  return e;
}

struct Finalized {
  Config config;
  EngineStats stats;
};

Finalized FinalizeOnThreads(const std::string& json, int world, bool matrices = true,
                            int64_t vocab = 0) {
  auto c = ParseDsConfig(json);
  EXPECT_TRUE(c.ok()) << c.status();
  Finalized out;
  std::mutex mu;
  RunThreads(world, [&](int rank, Communicator* comm) {
    auto e = LayeredEngine(*c, comm, matrices, vocab);
    ASSERT_TRUE(e.ok()) << e.status();
    std::lock_guard<std::mutex> l(mu);
    if (rank == 0) {
      out.config = (*e)->config();
      out.stats = (*e)->Stats();
    }
  });
  return out;
}

// A ds_config that names no sizes: reduce buckets of H^2 elements, not the
// model; stage 3 keeps params under 10 H whole and prefetches 0.9 H^2.
TEST(SizesFromTheModel, AbsentSizesFollowTheHiddenSize) {
  const int64_t h2 = kHidden * kHidden;
  const int64_t psi = kLayers * (h2 + kHidden);  // 4224, no padding at W = 2
  for (int stage = 0; stage <= 3; ++stage) {
    const Finalized f = FinalizeOnThreads(
        absl::StrCat(R"({"zero_optimization": {"stage": )", stage, "}}"), 2);
    EXPECT_EQ(f.stats.padded_numel, psi);
    EXPECT_EQ(f.config.reduce_bucket_size, h2) << "stage " << stage;
    EXPECT_EQ(f.config.stage3_prefetch_bucket_size, 921);  // 0.9 * 1024
    EXPECT_EQ(f.config.stage3_param_persistence_threshold, 10 * kHidden);
    // Two buckets of H^2 fp32 gradients, the fp32 pack, and at stages 2-3
    // the fp32 receive buffer of the reduce-scatter; at stage 3 the staging
    // that refreshes the persistent biases in one all-gather.
    const int64_t bucket_bytes = 2 * h2 * 4 + h2 * 4 + (stage >= 2 ? h2 * 4 : 0) +
                                 (stage == 3 ? kLayers * kHidden * 4 : 0);
    EXPECT_EQ(f.stats.buffer_bytes, bucket_bytes) << "stage " << stage;
    if (stage == 3) {
      // The own shard, plus the biases (32 < 320 elements) whole.
      EXPECT_EQ(f.stats.param_bytes, psi / 2 * 4 + kLayers * kHidden * 4);
    }
  }
  // DeepSpeed's defaults written out are kept: buckets of the whole model,
  // every param persistent.
  const Finalized set = FinalizeOnThreads(R"({"zero_optimization": {"stage": 3,
      "reduce_bucket_size": 5e8, "stage3_prefetch_bucket_size": 5e7,
      "stage3_param_persistence_threshold": 1e5}})", 2);
  EXPECT_EQ(set.config.reduce_bucket_size, 500000000);
  // Every param persistent: the refresh staging holds them all.
  EXPECT_EQ(set.stats.buffer_bytes, 4 * psi * 4 + psi * 4);
  EXPECT_EQ(set.stats.param_bytes, psi / 2 * 4 + psi * 4);
  // A model without 2-D params has no hidden size: the fixed defaults stay.
  const Finalized flat = FinalizeOnThreads(R"({"zero_optimization": {"stage": 3}})", 2, false);
  EXPECT_EQ(flat.config.reduce_bucket_size, 500000000);
  EXPECT_EQ(flat.config.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(flat.config.stage3_param_persistence_threshold, 100000);
}

// A GPT-like model: the largest 2-D param is an embedding [vocab, H]. The
// hidden size is its smaller dimension, so buckets stay H^2 (not vocab x H,
// DeepSpeed's and HF's hidden_size^2), and the embedding's gradient gets a
// buffer of its own, once: buffers are 4 H^2-sized staging areas plus one
// embedding in the working dtype, where a bucket stretched to hold the
// embedding would make all four vocab x H.
TEST(SizesFromTheModel, AnEmbeddingLargerThanABucketHasItsOwnBuffer) {
  const int64_t h2 = kHidden * kHidden, vocab = 300;
  for (int stage = 0; stage <= 3; ++stage) {
    const Finalized f = FinalizeOnThreads(
        absl::StrCat(R"({"zero_optimization": {"stage": )", stage, "}}"), 2, true, vocab);
    EXPECT_EQ(f.config.reduce_bucket_size, h2) << "stage " << stage;
    EXPECT_EQ(f.config.stage3_prefetch_bucket_size, 921);
    EXPECT_EQ(f.config.stage3_param_persistence_threshold, 10 * kHidden);
    // fp32: two buckets, the pack, the receive at stages 2-3, the embedding,
    // at stage 3 the persistent biases' refresh staging.
    EXPECT_EQ(f.stats.buffer_bytes,
              2 * h2 * 4 + h2 * 4 + (stage >= 2 ? h2 * 4 : 0) + vocab * kHidden * 4 +
                  (stage == 3 ? kLayers * kHidden * 4 : 0))
        << "stage " << stage;
  }
}

// A param larger than a bucket is reduced from its own buffer in pieces that
// fit the staging: bit for bit the training of buckets that hold it, at every
// stage, world, precision, with reduce_scatter off, accumulation, overlap and
// an overflowing step; far smaller buffers.
TEST(LargeParams, OwnBufferTrainsBitForBitLikeABucketHoldingIt) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 3, 4}) {
      for (DType t : {DType::kF32, DType::kBF16}) {
        for (int rs = 0; rs < 2; ++rs) {
          if (rs == 0 && stage == 0) continue;  // stage 0 all-reduces anyway
          Config small = SmallMlpConfig(stage, t);
          small.reduce_bucket_size = 16;  // every weight is larger
          small.reduce_scatter = rs;
          small.gradient_accumulation_steps = 2;
          small.overlap_comm = 1;
          Config big = small;
          big.reduce_bucket_size = 1 << 20;  // one bucket holds the model
          MlpSpec spec;
          spec.inf_step = 3;
          spec.inf_rank = world - 1;
          MlpResult a = TrainAt(small, world, spec);
          MlpResult b = TrainAt(big, world, spec);
          const std::string what = absl::StrCat("stage ", stage, " world ", world, " ",
                                                DTypeName(t), " reduce_scatter ", rs);
          EXPECT_EQ(MaxRelDiff(a, b), 0.0) << what;
          ASSERT_EQ(a.steps.size(), b.steps.size()) << what;
          for (size_t k = 0; k < a.steps.size(); ++k) {
            EXPECT_EQ(a.steps[k].skipped, b.steps[k].skipped) << what << " step " << k;
            EXPECT_EQ(a.steps[k].grad_norm, b.steps[k].grad_norm) << what << " step " << k;
          }
          EXPECT_LT(a.stats.buffer_bytes, b.stats.buffer_bytes) << what;
          // The same elements are sent, in more calls (an all-reduce's
          // 2n(W-1)/W is rounded down per call).
          EXPECT_EQ(Sent(a.stats, CollectiveKind::kReduceScatter),
                    Sent(b.stats, CollectiveKind::kReduceScatter)) << what;
          const int64_t ar_a = Sent(a.stats, CollectiveKind::kAllReduce);
          const int64_t ar_b = Sent(b.stats, CollectiveKind::kAllReduce);
          EXPECT_LE(ar_a, ar_b) << what;
          EXPECT_GE(ar_a, ar_b - a.stats.collective_calls) << what;
          if (world > 1) {
            EXPECT_GT(a.stats.collective_calls, b.stats.collective_calls) << what;
          }
        }
      }
    }
  }
}

// One buffer holds one large param's gradient at a time: a second one asked
// for while the first is out is refused naming both; after grad_ready the
// buffer is free again.
TEST(LargeParams, OneLargeGradientOutAtATime) {
  auto c = ParseDsConfig(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 100}})");
  ASSERT_TRUE(c.ok());
  RunThreads(2, [&](int, Communicator* comm) {
    auto e = LayeredEngine(*c, comm);
    ASSERT_TRUE(e.ok()) << e.status();
    Engine& en = **e;
    const int w0 = *en.FindParam("layer0.weight"), w1 = *en.FindParam("layer1.weight");
    ASSERT_TRUE(en.GradBuffer(w0).ok());
    auto again = en.GradBuffer(w0);
    ASSERT_TRUE(again.ok()) << again.status();
    auto second = en.GradBuffer(w1);
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("'layer1.weight'"), std::string::npos);
    EXPECT_NE(second.status().message().find("'layer0.weight'"), std::string::npos)
        << second.status();
    EXPECT_FALSE(en.Step().ok());  // layer0.weight's gradient is still out
  });
  RunThreads(2, [&](int, Communicator* comm) {
    auto e = LayeredEngine(*c, comm);
    ASSERT_TRUE(e.ok()) << e.status();
    Engine& en = **e;
    for (int l = 0; l < kLayers; ++l) {
      const int w = *en.FindParam(absl::StrCat("layer", l, ".weight"));
      ASSERT_TRUE(en.GradBuffer(w).ok());
      ASSERT_TRUE(en.GradReady(w).ok());
      EXPECT_EQ(en.GradReady(w).code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(en.GradBuffer(w).status().code(), absl::StatusCode::kFailedPrecondition);
    }
    for (int l = 0; l < kLayers; ++l) {
      const int b = *en.FindParam(absl::StrCat("layer", l, ".bias"));
      ASSERT_TRUE(en.GradBuffer(b).ok());
      ASSERT_TRUE(en.GradReady(b).ok());
    }
    auto info = en.Step();
    EXPECT_TRUE(info.ok()) << info.status();
  });
}

// Trained from a ds_config with every size absent, stage 3 ends where
// single-rank stage 0 does.
TEST(SizesFromTheModel, Stage3AtDefaultsTrains) {
  auto parsed = ParseDsConfig(R"({"zero_optimization": {"stage": 3},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "steps_per_print": 0})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  MlpSpec spec;
  spec.hidden = 40;
  MlpResult got = TrainAt(*parsed, 3, spec);
  EXPECT_EQ(got.stats.stage, 3);
  Config single = *parsed;
  single.stage = 0;
  EXPECT_LE(MaxRelDiff(got, TrainAt(single, 1, spec)), 1e-6);
}

// ---- coalesced refresh of stage 3's persistent params --------------------

// After each step stage 3 re-gathers its persistent params. Many small ones
// go in one all-gather (ParamCoordinator::RefreshPersistent): the same
// elements and the same bits as one all-gather per param, in fewer calls.
// allgather_bucket_size caps a batch: 1 puts every param alone (the old
// way); 80 splits fc1.bias (25) from fc2.weight (75) + fc2.bias (3).
TEST(CoalescedRefresh, FewerCallsSameBits) {
  MlpSpec spec;
  for (int world : {2, 3, 4}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      Config c = SmallMlpConfig(3, dtype);
      // fc1.bias, fc2.weight, fc2.bias persistent; fc1.weight (200) not.
      c.stage3_param_persistence_threshold = 100;
      Config alone = c;
      alone.allgather_bucket_size = 1;
      Config split = c;
      split.allgather_bucket_size = 80;
      const std::string what = absl::StrCat("world ", world, " ", DTypeName(dtype));
      MlpResult one = TrainAt(c, world, spec);
      MlpResult each = TrainAt(alone, world, spec);
      MlpResult two = TrainAt(split, world, spec);
      ASSERT_EQ(one.steps.size(), static_cast<size_t>(spec.steps)) << what;
      EXPECT_EQ(MaxRelDiff(one, each), 0.0) << what;
      EXPECT_EQ(MaxRelDiff(two, each), 0.0) << what;
      for (size_t k = 0; k < one.steps.size(); ++k) {
        EXPECT_EQ(one.steps[k].grad_norm, each.steps[k].grad_norm) << what << " step " << k;
      }
      // Same elements moved; per step 3 refresh calls become 1 (or 2).
      for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
        EXPECT_EQ(one.stats.sent[k], each.stats.sent[k]) << what << " kind " << k;
        EXPECT_EQ(two.stats.sent[k], each.stats.sent[k]) << what << " kind " << k;
      }
      const int64_t steps = spec.steps;
      EXPECT_EQ(each.stats.collective_calls - one.stats.collective_calls, steps * 2) << what;
      EXPECT_EQ(each.stats.collective_calls - two.stats.collective_calls, steps * 1) << what;
      // The staging: the three persistent params (103 elements) per rank.
      EXPECT_EQ(one.stats.buffer_bytes - each.stats.buffer_bytes,
                103 * static_cast<int64_t>(DTypeSize(dtype))) << what;
      // And still the training of one rank (independent of the refresh).
      Config single = c;
      single.stage = 0;
      EXPECT_LE(MaxRelDiff(one, TrainAt(single, 1, spec)), Tolerance(dtype)) << what;
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
