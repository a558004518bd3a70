// ZeRO-Offload (offload_optimizer "cpu" with GPU state, docs/ARCHITECTURE.md,
// "Offload"): on the CPU the GPU is the off-host stand-in
// device, so the engine takes the HostStateStore path (state in host memory,
// CPU update, working copy pipelined up) and must match the device-resident
// run bit for bit.
#include <gtest/gtest.h>

#include "tests/testing/mlp_harness.h"
#include "tests/testing/off_host_device.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

Config Cfg(int stage) {
  Config c;
  c.stage = stage;
  c.lr = 1e-2;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 30;
  c.reduce_bucket_size = 100;
  c.stage3_param_persistence_threshold = 10;
  return c;
}


// ZeRO-Offload: "cpu" offload with an off-host device keeps master weights
// and moments in host memory (off the device) and updates them on the CPU.
TEST(CpuOffloadTest, KeepsOptimizerStateOffTheDeviceBitwise) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      Config c = Cfg(stage);
      c.dtype = t;
      MlpSpec dev;
      dev.make_device = [] { return std::make_unique<OffHostDevice>(); };
      auto ref = TrainAll(c, 3, dev);
      c.offload_optimizer.device = OffloadDevice::kCpu;
      size_t device_bytes[2] = {0, 0};
      for (int off = 0; off < 2; ++off) {
        Config cc = Cfg(stage);
        cc.dtype = t;
        if (off) cc.offload_optimizer.device = OffloadDevice::kCpu;
        RunThreads(3, [&](int rank, Communicator* comm) {
          auto e = MakeMlpEngine(cc, comm, dev);
          ASSERT_TRUE(e.ok()) << e.status();
          if (rank == 0) device_bytes[off] = (*e)->device()->allocated_bytes();
        });
      }
      // Master + Adam moments: 12 bytes per owned element leave the device
      // (fp32: 8, the device-resident run's master being its working copy's
      // owned range, which stays).
      const int64_t owned = ref[0].stats.padded_numel / (stage == 0 ? 1 : 3);
      const int64_t per = t == DType::kF32 ? 8 : 12;
      EXPECT_GE(device_bytes[0] - device_bytes[1], static_cast<size_t>(per * owned))
          << "stage " << stage;
      auto off = TrainAll(c, 3, dev);
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(MaxRelDiff(off[r], ref[r]), 0.0) << "stage " << stage << " " << DTypeName(t);
      }
      // Many pieces through the pipeline (down k+1 / update k / up k-1), and
      // pin_memory requested; the layout is the same (one group per param).
      c.sub_group_size = 40;
      c.offload_optimizer.pin_memory = true;
      Config plain = c;
      plain.offload_optimizer.device = OffloadDevice::kNone;
      auto ref_small = TrainAll(plain, 3, dev);
      auto piped = TrainAll(c, 3, dev);
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(MaxRelDiff(piped[r], ref_small[r]), 0.0) << "pipelined, stage " << stage;
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
