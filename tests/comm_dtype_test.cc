// communication_data_type: gradients reduced in fp16 or bf16 move
// exactly half the bytes of fp32 reductions (the same elements), and train
// within the format's rounding of the fp32-reduced run, at every stage, with
// reduce-scatter and all-reduce, over the thread communicator, the staging
// communicator and the NCCL-shaped one on the stand-in device.
#include <gtest/gtest.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/backend/standin_comm.h"
#include "core/device/guarded_device.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

constexpr int kRs = static_cast<int>(CollectiveKind::kReduceScatter);
constexpr int kAr = static_cast<int>(CollectiveKind::kAllReduce);

enum class Where { kThread, kStandinStaging, kStandinNccl };

std::vector<MlpResult> Train(const Config& c, int world, Where where) {
  MlpSpec spec;
  spec.steps = 6;
  if (where != Where::kThread) {
    spec.make_device = [] { return std::unique_ptr<Device>(MakeGuardedDevice()); };
  }
  std::vector<MlpResult> out(world);
  std::mutex mu;
  RunThreads(world, [&](int rank, Communicator* comm) {
    absl::StatusOr<MlpResult> r;
    if (where == Where::kStandinNccl) {
      auto dup = comm->Duplicate();
      ASSERT_TRUE(dup.ok());
      auto nccl = MakeStandinDeviceComm(std::move(*dup));
      r = TrainMlp(c, nccl.get(), spec);
    } else {
      r = TrainMlp(c, comm, spec);
    }
    std::lock_guard<std::mutex> l(mu);
    ASSERT_TRUE(r.ok()) << "rank " << rank << ": " << r.status();
    out[rank] = std::move(*r);
  });
  return out;
}

TEST(CommDtype, HalfTheBytesWithinFormatTolerance) {
  for (int world : {2, 3}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (bool rs : {true, false}) {
        if (!rs && stage == 0) continue;  // stage 0 always all-reduces
        Config c = SmallMlpConfig(stage, DType::kF32);
        c.reduce_scatter = rs;
        c.gradient_accumulation_steps = 2;
        auto ref = Train(c, world, Where::kThread);
        for (DType ct : {DType::kF16, DType::kBF16}) {
          Config h = c;
          h.communication_data_type = ct;
          // bf16 keeps 8 bits of mantissa, fp16 11: one rounding of each
          // reduced gradient, through 6 Adam steps of lr 1e-2.
          const double tol = ct == DType::kBF16 ? 2e-2 : 4e-3;
          for (Where w : {Where::kThread, Where::kStandinStaging, Where::kStandinNccl}) {
            const std::string what =
                absl::StrCat("world ", world, " stage ", stage, rs ? " reduce-scatter" : " all-reduce",
                             " ", DTypeName(ct), " via ", static_cast<int>(w));
            auto got = Train(h, world, w);
            for (int r = 0; r < world; ++r) {
              const double d = MaxRelDiff(got[r], ref[r]);
              EXPECT_LE(d, tol) << what << " rank " << r;
              EXPECT_GT(d, 0.0) << what << ": reduced in fp32 after all?";
              // The same elements, half the bytes.
              for (int k : {kRs, kAr}) {
                EXPECT_EQ(got[r].stats.sent[k], ref[r].stats.sent[k]) << what;
                EXPECT_EQ(2 * got[r].stats.sent_bytes[k], ref[r].stats.sent_bytes[k]) << what;
              }
              EXPECT_GT(ref[r].stats.sent_bytes[rs && stage > 0 ? kRs : kAr], 0) << what;
            }
            if (w == Where::kThread) {
              // Through the comms_logger's wrapper too (it forwards them).
              Config logged = h;
              logged.observe.comms_logger = true;
              auto l = Train(logged, world, w);
              for (int r = 0; r < world; ++r) {
                EXPECT_EQ(MaxRelDiff(l[r], got[r]), 0.0) << what << " with comms_logger";
                EXPECT_EQ(l[r].stats.sent_bytes[kAr] + l[r].stats.sent_bytes[kRs],
                          got[r].stats.sent_bytes[kAr] + got[r].stats.sent_bytes[kRs])
                    << what;
              }
            }
            // Every rank holds the same params (the reductions agree).
            for (int r = 1; r < world; ++r) EXPECT_EQ(MaxRelDiff(got[r], got[0]), 0.0) << what;
          }
        }
      }
    }
  }
}

// DeepSpeed's default (engine.communication_data_type): with the key unset
// an fp16 model reduces in fp16 and a bf16 model in bf16, at half the bytes
// of an explicit "fp32", within the format's rounding of it; an fp32 model
// reduces in fp32 (bit for bit the explicit fp32 run); at one rank the
// default changes nothing (model-dtype gradients cast back exactly). These
// are the configurations of //tests:bitwise_golden_test, whose fp16/bf16
// hashes at worlds 3/4 were re-recorded on the strength of this check.
TEST(CommDtype, DefaultFollowsTheWorkingDtype) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int gas : {1, 2}) {
        for (int world : {1, 3, 4}) {
          Config c = SmallMlpConfig(stage, t);
          c.gradient_accumulation_steps = gas;
          ASSERT_FALSE(c.communication_data_type.has_value());
          Config fp32 = c;
          fp32.communication_data_type = DType::kF32;
          MlpSpec spec;
          spec.steps = 6;
          const std::string what = absl::StrCat("stage ", stage, " ", DTypeName(t), " gas ", gas,
                                                " world ", world);
          MlpResult got = TrainAt(c, world, spec);
          MlpResult ref = TrainAt(fp32, world, spec);
          EXPECT_EQ(got.stats.comm_dtype, t) << what;
          EXPECT_EQ(ref.stats.comm_dtype, DType::kF32) << what;
          ASSERT_EQ(got.steps.size(), ref.steps.size()) << what;
          for (size_t i = 0; i < got.steps.size(); ++i) {
            EXPECT_EQ(got.steps[i].skipped, ref.steps[i].skipped) << what << " step " << i;
          }
          const int main_kind = stage > 0 ? kRs : kAr;
          if (world == 1 || t == DType::kF32) {
            EXPECT_EQ(MaxRelDiff(got, ref), 0.0) << what;
            for (int k : {kRs, kAr}) {
              EXPECT_EQ(got.stats.sent_bytes[k], ref.stats.sent_bytes[k]) << what;
            }
            continue;
          }
          // Same tolerances as above: one rounding of each reduced gradient
          // to the format, through 6 Adam steps of lr 1e-2.
          const double d = MaxRelDiff(got, ref);
          EXPECT_LE(d, t == DType::kBF16 ? 2e-2 : 4e-3) << what;
          // At world 4 the two can agree bit for bit: stages 0, 2 and 3 store
          // the reduced sum times 1/4 into the model-dtype gradient, and
          // rounding the sum to the format before a power-of-two scale is
          // the same rounding as after it. 1/3 is not a power of two.
          if (world == 3) { EXPECT_GT(d, 0.0) << what << ": reduced in fp32 after all?"; }
          for (int k : {kRs, kAr}) {
            EXPECT_EQ(got.stats.sent[k], ref.stats.sent[k]) << what;
            EXPECT_EQ(2 * got.stats.sent_bytes[k], ref.stats.sent_bytes[k]) << what;
          }
          EXPECT_GT(ref.stats.sent_bytes[main_kind], 0) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
