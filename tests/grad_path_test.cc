// The gradient path's memory passes (docs/ARCHITECTURE.md, "Reduced as
// stored"), counted by a device
// wrapper: the passes a reduction makes over every gradient element.
#include <gtest/gtest.h>

#include <cstdio>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "tests/testing/counting_device.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

struct Counted {
  std::vector<MlpResult> results;
  std::vector<std::unique_ptr<PassCounts>> counts;
};

Counted Train(const Config& c, int world, int steps) {
  Counted run;
  run.results.resize(world);
  for (int r = 0; r < world; ++r) run.counts.push_back(std::make_unique<PassCounts>());
  std::mutex mu;
  RunThreads(world, [&](int rank, Communicator* comm) {
    MlpSpec spec;
    spec.steps = steps;
    PassCounts* pc = run.counts[rank].get();
    spec.make_device = [pc] { return std::unique_ptr<Device>(new CountingDevice(pc)); };
    auto r = TrainMlp(c, comm, spec);
    std::lock_guard<std::mutex> l(mu);
    ASSERT_TRUE(r.ok()) << "rank " << rank << ": " << r.status();
    run.results[rank] = std::move(*r);
  });
  return run;
}

constexpr int kWorld = 2, kSteps = 3, kMicro = 2;

// Gradient elements handed in per micro-step: the MLP's trainable params
// (the embedding is frozen).
int64_t HandedIn() {
  MlpSpec m;
  return m.hidden * m.in + m.hidden + m.out * m.hidden + m.out;
}

Config Base(int stage, DType t, int64_t bucket) {
  Config c = SmallMlpConfig(stage, t);
  c.gradient_accumulation_steps = kMicro;
  c.reduce_bucket_size = bucket;
  return c;
}

// The same config through the packed path: gradients cast into the fp32
// pack before the collective. fp32: prescale_gradients (the pack applies
// the pre-sum scale); fp16/bf16: an fp32 communication dtype. Neither
// changes what the boundary does at these stages.
Config Packed(Config c) {
  if (c.dtype == DType::kF32) {
    c.prescale_gradients = true;
  } else {
    c.communication_data_type = DType::kF32;
  }
  return c;
}

// Trains `c` and the same config through the packed path, then calls
// check(stored, packed) with each rank's counts; returns the stored run.
template <typename Check>
Counted CompareWithPacked(const Config& c, Check check) {
  Counted stored = Train(c, kWorld, kSteps);
  Counted packed = Train(Packed(c), kWorld, kSteps);
  for (int r = 0; r < kWorld; ++r) check(*stored.counts[r], *packed.counts[r]);
  return stored;
}

std::string Name(const Config& c) {
  return absl::StrCat("stage ", c.stage, " ", DTypeName(c.dtype), " bucket ",
                      c.reduce_bucket_size);
}

// Stage 0's boundary all-reduce runs in the bucket slots (and in the local
// gradient for a param larger than the staging): the pack's widening pass
// is gone, and at fp32 its copy back too. With a half dtype the old path
// cast the pack again to the half send buffer and back (two passes more
// than an fp32 reduction); now it makes one widening pass fewer than one.
TEST(GradPath, Stage0AllReducesWithoutThePack) {
  const int64_t g = HandedIn();
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t bucket : {100, 100000}) {
      const Config c = Base(0, t, bucket);
      const std::string what = Name(c);
      CompareWithPacked(c, [&](const PassCounts& s, const PassCounts& p) {
        // Each step reduces every gradient once, at the boundary micro-step.
        EXPECT_EQ(p.to_f32 - s.to_f32, g * kSteps) << what;
        EXPECT_EQ(p.from_f32 - s.from_f32, t == DType::kF32 ? g * kSteps : 0) << what;
        EXPECT_EQ(s.copied_bytes, p.copied_bytes) << what;
        EXPECT_LT(s.bytes_moved, p.bytes_moved) << what;
      });
    }
  }
}

// Stage 1's flat reduce-scatter of a half working dtype: nothing narrowed
// (the old path cast the whole local gradient to the send buffer), and in
// one chunk nothing copied either: the local gradient is the send buffer.
// One chunk or several, the thread communicator sums each element once in
// rank order, so both give the same bits.
TEST(GradPath, Stage1ReduceScattersTheHalfGradientAsItLies) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<MlpResult> by_bucket;
    for (int64_t bucket : {100, 100000}) {
      const Config c = Base(1, t, bucket);
      const std::string what = Name(c);
      Counted stored = CompareWithPacked(c, [&](const PassCounts& s, const PassCounts& p) {
        EXPECT_EQ(s.from_f32, 0) << what;
        EXPECT_LT(s.to_f32, p.to_f32) << what;
        if (bucket == 100000) {
          EXPECT_EQ(s.copied_bytes, p.copied_bytes) << what;
          EXPECT_LT(s.bytes_moved, p.bytes_moved) << what;
        }
      });
      by_bucket.push_back(stored.results[0]);
    }
    EXPECT_EQ(MaxRelDiff(by_bucket[0], by_bucket[1]), 0.0) << DTypeName(t);
  }
}

// Stages 2-3: no pack. Each bucket piece goes to the collective in the
// working dtype, from the slots where they are already in rank order,
// else copied together once; only this rank's received piece is widened
// (as many elements as it then accumulates: accumulate_f32).
TEST(GradPath, Stages23ReduceScatterWithoutThePack) {
  const int64_t g = HandedIn();
  for (int stage : {2, 3}) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      for (int64_t bucket : {100, 100000}) {
        const Config c = Base(stage, t, bucket);
        const std::string what = Name(c);
        const int64_t es = DTypeSize(t);
        CompareWithPacked(c, [&](const PassCounts& s, const PassCounts& p) {
          const int64_t all = g * kMicro * kSteps;  // every handed-in element
          EXPECT_EQ(s.from_f32, 0) << what;
          if (t == DType::kF32) {
            EXPECT_EQ(s.to_f32, 0) << what;  // no cast at all
            EXPECT_EQ(p.to_f32, all) << what;
          } else {
            EXPECT_EQ(s.to_f32, p.to_f32 - all + s.accumulate_f32) << what;
          }
          // At most one copy of each element; with small buckets most lie
          // within one rank's shard and go as they are.
          const int64_t copied = s.copied_bytes - p.copied_bytes;
          EXPECT_GE(copied, 0) << what;
          EXPECT_LE(copied, all * es) << what;
          if (bucket == 100) { EXPECT_LT(copied, all * es / 2) << what; }
        });
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
