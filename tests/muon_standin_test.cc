// Muon on the guarded asynchronous stand-in for a GPU (core/device/
// guarded_device.h: device memory the host cannot touch, work that runs
// only when waited for): the Muon phase's gradient reads, state reads and
// writes and working-copy writes (docs/ARCHITECTURE.md, "Muon") ordered with
// the device's queue, through the staging and the NCCL-shaped communicator,
// with the optimizer state in device memory and offloaded to the host: bit
// for bit the plain CPU engine, stages 0-3, fp32 and bf16, worlds 1 and 3.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/standin_training.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

TEST(MuonStandin, EqualsPlainCpuEngineBitwise) {
  for (int world : {1, 3}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (DType t : {DType::kF32, DType::kBF16}) {
        for (bool offload : {false, true}) {
          Config c = Cfg(stage, t);
          ApplyStepMode("muon", &c);
          Config pc = c;  // offload_optimizer cpu on the CPU device: in memory
          if (offload) c.offload_optimizer.device = OffloadDevice::kCpu;
          MlpSpec plain;
          plain.steps = 6;
          const std::vector<MlpResult> ref = TrainAll(pc, world, plain);
          for (CommKind k : {CommKind::kStaging, CommKind::kNcclShaped}) {
            const std::string what = absl::StrCat(
                "muon world ", world, " stage ", stage, " ", DTypeName(t),
                offload ? " offload" : "", k == CommKind::kStaging ? " staging" : " nccl-shaped");
            ExpectSame(TrainOn(c, world, StandinSpec(), k), ref, what);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
