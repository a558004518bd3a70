// The engine on a GPU (CUDA device): stages 0-3 at world 1, and stages 1-3 at
// world 2 and 4 over thread ranks sharing the GPU (collectives staged through
// host memory), equal to the CPU engine. SKIPPED, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <mutex>

#include "core/device/cuda_device.h"
#include "core/backend/device_factory.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

Config Cfg(int stage, DType t) {
  Config c;
  c.stage = stage;
  c.dtype = t;
  c.lr = 1e-2;
  c.steps_per_print = 0;
  c.initial_scale_power = 8;
  c.reduce_bucket_size = 100;
  c.stage3_param_persistence_threshold = 10;
  return c;
}

std::vector<MlpResult> Train(const Config& c, int world, bool gpu) {
  MlpSpec spec;
  if (gpu) {
    spec.make_device = [] {
      auto d = MakeDevice("cuda", 0);
      return d.ok() ? std::move(*d) : nullptr;
    };
  }
  std::vector<MlpResult> out(world);
  std::mutex mu;
  RunThreads(world, [&](int rank, Communicator* comm) {
    auto r = TrainMlp(c, comm, spec);
    std::lock_guard<std::mutex> l(mu);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) out[rank] = std::move(*r);
  });
  return out;
}

class GpuEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDevice::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

TEST_F(GpuEngineTest, WorldOneEveryStageEqualsCpu) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      auto cpu = Train(Cfg(stage, t), 1, false);
      auto gpu = Train(Cfg(stage, t), 1, true);
      // Same per-element math (no FMA contraction on either side).
      EXPECT_LE(MaxRelDiff(gpu[0], cpu[0]), t == DType::kF32 ? 1e-6 : 1e-3)
          << "stage " << stage << " " << DTypeName(t);
    }
  }
}

TEST_F(GpuEngineTest, SeveralRanksOnOneGpuThroughStagedCollectives) {
  for (int world : {2, 4}) {
    for (int stage = 1; stage <= 3; ++stage) {
      auto cpu = Train(Cfg(stage, DType::kF32), world, false);
      auto gpu = Train(Cfg(stage, DType::kF32), world, true);
      for (int r = 0; r < world; ++r) {
        EXPECT_LE(MaxRelDiff(gpu[r], cpu[r]), 1e-6) << "world " << world << " stage " << stage;
      }
    }
  }
}

// The engine on NCCL (world 1, the communicator bootstrapped over a singleton
// MPI), with the caller's copies on the legacy default stream, which does
// not wait for the device's non-blocking compute stream: without NCCL
// waiting on the compute stream and pointers handed out only after the work
// that fills them, this reads stale values.
TEST_F(GpuEngineTest, WorldOneOnNcclEqualsCpu) {
  auto nccl = MakeNcclComm(nullptr, 0, 60.0);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  MlpSpec spec;
  spec.make_device = [] {
    auto d = MakeDevice("cuda", 0);
    return d.ok() ? std::move(*d) : nullptr;
  };
  spec.caller_copy = [](Device*, void* dst, const void* src, size_t n) {
    ASSERT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyDefault), cudaSuccess);
  };
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      auto cpu = Train(Cfg(stage, t), 1, false);
      auto gpu = TrainMlp(Cfg(stage, t), nccl->get(), spec);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      EXPECT_LE(MaxRelDiff(*gpu, cpu[0]), t == DType::kF32 ? 1e-6 : 1e-3)
          << "stage " << stage << " " << DTypeName(t);
      EXPECT_EQ(gpu->steps.size(), cpu[0].steps.size());
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
