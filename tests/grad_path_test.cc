// The gradient path's memory passes (issue 18, "Gradient path without extra
// copies"; docs/ARCHITECTURE.md, "One training step"), counted by a device
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

TEST(GradPath, Print) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (bool pre : {false, true}) {
        Config c = SmallMlpConfig(stage, t);
        c.gradient_accumulation_steps = 2;
        c.prescale_gradients = pre;
        Counted run = Train(c, 2, 3);
        const PassCounts& p = *run.counts[0];
        std::printf("%s stage %d pre %d: to %lld from %lld acc %lld acc32 %lld copy %lld zero %lld moved %lld\n",
                    DTypeName(t), stage, pre, (long long)p.to_f32, (long long)p.from_f32,
                    (long long)p.accumulate, (long long)p.accumulate_f32,
                    (long long)p.copied_bytes, (long long)p.zeroed_bytes, (long long)p.bytes_moved);
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
