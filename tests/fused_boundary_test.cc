// The optimizer boundary's two passes (docs/ARCHITECTURE.md, "One training
// step") against the separate passes they replaced: the fused update (raw
// gradients cast per tile, zeroed once read; stage 1's full gradient zeroed
// as the reduce-scatter packs it) must give the same bits as cast into an
// fp32 scratch + update + zeroing, at every stage x dtype x world, with
// accumulation (a gradient left unzeroed would leak into the next step),
// Adam and SGD with momentum, an fp16 overflow step, clipping, and with the
// optimizer state on NVMe. And the kernel alone: AdamStepRawGrad /
// SgdStepRawGrad equal ToF32 + AdamStep / SgdStep bit for bit and leave the
// gradients zero, over sizes that are not a multiple of the tile.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/engine/gradient_reducer.h"
#include "core/engine/optimizer_boundary.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/testing/expect_same.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

MlpResult Train(Config c, int world, const MlpSpec& spec, bool fused) {
  c.engine_paths.fused_boundary = fused;
  return TrainAt(c, world, spec);
}

TEST(FusedBoundaryTest, SameBitsAsSeparatePasses) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int world : {1, 3}) {
        for (const char* mode : {"adamw", "gas2_clip", "sgd", "overflow"}) {
          const std::string m = mode;
          Config c = SmallMlpConfig(stage, t);
          MlpSpec spec;
          spec.steps = 5;
          ApplyStepMode(m, &c);
          if (m == "sgd") c.weight_decay = 0.01;
          if (m == "overflow") {
            spec.inf_step = 2;
            spec.inf_rank = world - 1;
          }
          const std::string what =
              absl::StrCat("stage ", stage, " ", DTypeName(t), " world ", world, " ", m);
          MlpResult fused = Train(c, world, spec, true);
          MlpResult separate = Train(c, world, spec, false);
          ExpectSameBits(fused, separate, what);
          // The separate passes ran: their fp32 scratch (fp16/bf16 gradients
          // read in place; stage 1 has its reduce-scatter's scratch anyway).
          if (t != DType::kF32 && stage != 1) {
            EXPECT_GT(separate.stats.buffer_bytes, fused.stats.buffer_bytes) << what;
          }
          if (m == "overflow") { EXPECT_TRUE(fused.steps[2].skipped) << what; }
          if (m == "gas2_clip" && t == DType::kF32) {
            // And both still train like the double-precision reference.
            MlpResult ref = TrainMlpReference(c, spec);
            EXPECT_LT(MaxRelDiff(fused, ref), 1e-4) << what;
          }
        }
      }
    }
  }
}

// Stage 1 at one rank skips its reduce-scatter when that is the identity
// (Stage1ReduceIsIdentity) and reads the gradients in place. Against the
// reduce-scatter path, forced by gradient_predivide_factor 2 (times 1/2
// before, 2 after: exact in fp32), fused and separate: the same bits.
TEST(FusedBoundaryTest, Stage1OneRankIdentitySameBitsAsReduceScatter) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const char* mode : {"gas2_clip", "overflow"}) {
      const std::string m = mode;
      Config c = SmallMlpConfig(1, t);
      MlpSpec spec;
      spec.steps = 4;
      if (m == "gas2_clip") {
        c.gradient_accumulation_steps = 2;
        c.gradient_clipping = 0.05;
      } else {
        spec.inf_step = 2;
        spec.inf_rank = 0;
      }
      ASSERT_TRUE(Stage1ReduceIsIdentity(c, 1));
      Config scattered = c;
      scattered.gradient_predivide_factor = 2.0;
      ASSERT_FALSE(Stage1ReduceIsIdentity(scattered, 1));
      for (bool fused : {true, false}) {
        const std::string what = absl::StrCat(DTypeName(t), " ", m, fused ? " fused" : "");
        ExpectSameBits(Train(c, 1, spec, fused), Train(scattered, 1, spec, fused), what);
      }
    }
  }
}

TEST(FusedBoundaryTest, NvmeOptimizerStateSameBits) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/fused_nvme");
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p '", dir, "'").c_str()), 0);
  for (int stage : {1, 2, 3}) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      Config c = SmallMlpConfig(stage, t);
      c.sub_group_size = 96;  // several pieces per group
      c.offload_optimizer.device = OffloadDevice::kNvme;
      c.offload_optimizer.nvme_path = dir;
      c.offload_optimizer.buffer_count = 3;
      MlpSpec spec;
      spec.steps = 4;
      ExpectSameBits(Train(c, 3, spec, true), Train(c, 3, spec, false),
                     absl::StrCat("nvme stage ", stage, " ", DTypeName(t)));
    }
  }
}

std::vector<uint16_t> Narrow(const std::vector<float>& x, DType t) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    h[i] = t == DType::kBF16 ? math::FloatToBf16(x[i]) : math::FloatToHalf(x[i]);
  }
  return h;
}

TEST(FusedBoundaryTest, KernelEqualsCastThenUpdate) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n : {int64_t{1}, int64_t{4097}, int64_t{(1 << 15) + 333}}) {
    for (DType gt : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (DType wt : {DType::kF32, DType::kBF16}) {
        for (bool sgd : {false, true}) {
          std::vector<float> g(n), p(n), m(n), v(n);
          for (int64_t i = 0; i < n; ++i) {
            g[i] = nd(rng);
            p[i] = nd(rng);
            m[i] = 0.1f * nd(rng);
            v[i] = std::abs(0.01f * nd(rng));
          }
          std::vector<uint16_t> gh = Narrow(g, gt);
          void* graw = gt == DType::kF32 ? static_cast<void*>(g.data()) : gh.data();
          // Reference: cast, then the fp32 kernel.
          std::vector<float> g32(n), p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v;
          cpu::ToF32(graw, gt, g32.data(), n, 1.0f);
          std::vector<char> w1(n * 4), w2(n * 4);
          const math::AdamScalars as =
              math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, true, 3, 0.5f);
          math::SgdScalars ss;
          ss.lr = 0.1f;
          ss.momentum = 0.9f;
          ss.weight_decay = 0.01f;
          ss.grad_scale = 0.5f;
          if (sgd) {
            cpu::SgdStep(ss, g32.data(), p1.data(), m1.data(), n, w1.data(), wt);
            cpu::SgdStepRawGrad(ss, graw, gt, p2.data(), m2.data(), n, w2.data(), wt, true);
          } else {
            cpu::AdamStep(as, g32.data(), p1.data(), m1.data(), v1.data(), n, w1.data(), wt);
            cpu::AdamStepRawGrad(as, graw, gt, p2.data(), m2.data(), v2.data(), n, w2.data(),
                                 wt, true);
          }
          const std::string what = absl::StrCat("n ", n, " ", DTypeName(gt), " -> ",
                                                DTypeName(wt), sgd ? " sgd" : " adam");
          EXPECT_EQ(std::memcmp(p1.data(), p2.data(), n * 4), 0) << what;
          EXPECT_EQ(std::memcmp(m1.data(), m2.data(), n * 4), 0) << what;
          if (!sgd) { EXPECT_EQ(std::memcmp(v1.data(), v2.data(), n * 4), 0) << what; }
          EXPECT_EQ(std::memcmp(w1.data(), w2.data(), n * DTypeSize(wt)), 0) << what;
          const char* gb = static_cast<const char*>(graw);
          int64_t nonzero = 0;
          for (int64_t i = 0; i < n * static_cast<int64_t>(DTypeSize(gt)); ++i) nonzero += gb[i] != 0;
          EXPECT_EQ(nonzero, 0) << what << ": gradients not zeroed";
        }
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
