// Where each state lives (docs/ARCHITECTURE.md, "Offload"), decided once by
// DecideOffloadPlacement: its answers against the rules the docs state
// (DeepSpeed's offload keys on a GPU; on the CPU device "cpu" changes
// nothing unless delayed_update), and the engine and the memory estimator refusing the same
// pairing, every rank naming the keys.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "core/engine/offload_placement.h"
#include "core/estimate/memory_estimate.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/off_host_device.h"

namespace zero {
namespace testing {
namespace {

constexpr StateTier kDev = StateTier::kDevice, kHost = StateTier::kHost,
                    kNvme = StateTier::kNvme;
constexpr OffloadDevice kNone = OffloadDevice::kNone, kCpu = OffloadDevice::kCpu,
                        kNvmeDev = OffloadDevice::kNvme;

struct Row {
  int stage;
  OffloadDevice optim, param;
  bool host_memory;  // the CPU device
  DType dtype;
  // Expected.
  StateTier state, params;
  bool grads_in_files, aliased;
};

TEST(OffloadPlacement, FollowsTheDocumentedRules) {
  const Row rows[] = {
      // No offload: everything in device memory; an fp32 master is the
      // working copy's owned range, a bf16 one is not.
      {2, kNone, kNone, false, DType::kF32, kDev, kDev, false, true},
      {2, kNone, kNone, false, DType::kBF16, kDev, kDev, false, false},
      // ZeRO-Offload on a GPU: state in host memory, a master of its own.
      {2, kCpu, kNone, false, DType::kF32, kHost, kDev, false, false},
      // "cpu" on the CPU device: host memory already, so device memory.
      {2, kCpu, kNone, true, DType::kF32, kDev, kDev, false, true},
      // NVMe state at stage 2: gradients stay in memory.
      {2, kNvmeDev, kNone, true, DType::kF32, kNvme, kDev, false, false},
      // ZeRO-Infinity on the CPU: stage 3's gradient shard in files too;
      // on a GPU it stays in device memory.
      {3, kNvmeDev, kNone, true, DType::kBF16, kNvme, kDev, true, false},
      {3, kNvmeDev, kNone, false, DType::kBF16, kNvme, kDev, false, false},
      // Stage 3's shard: "cpu" on a GPU is host memory, on the CPU device
      // device memory (and the fp32 master may alias it); "nvme" files.
      {3, kNone, kCpu, false, DType::kF32, kDev, kHost, false, false},
      {3, kNone, kCpu, true, DType::kF32, kDev, kDev, false, true},
      {3, kNone, kNvmeDev, true, DType::kF32, kDev, kNvme, false, false},
      {3, kNvmeDev, kNvmeDev, false, DType::kF32, kNvme, kNvme, false, false},
  };
  for (const Row& r : rows) {
    Config c;
    c.stage = r.stage;
    c.dtype = r.dtype;
    c.offload_optimizer.device = r.optim;
    c.offload_param.device = r.param;
    c.offload_param.pin_memory = true;
    const std::string what = std::string("stage ") + std::to_string(r.stage) + " optimizer " +
                             OffloadDeviceName(r.optim) + " param " +
                             OffloadDeviceName(r.param) + (r.host_memory ? " cpu " : " gpu ") +
                             DTypeName(r.dtype);
    auto p = DecideOffloadPlacement(c, r.host_memory, "dev");
    ASSERT_TRUE(p.ok()) << what << ": " << p.status();
    EXPECT_EQ(p->optimizer_state, r.state) << what;
    EXPECT_EQ(p->params, r.params) << what;
    EXPECT_EQ(p->grads_on_nvme, r.grads_in_files) << what;
    EXPECT_EQ(p->master_aliases_working, r.aliased) << what;
    // pin_memory pins only a host shard.
    EXPECT_EQ(p->pin_params, r.params == kHost) << what;
    EXPECT_EQ(p->any_nvme(), r.state == kNvme || r.params == kNvme) << what;
    // The aliasing is an engine path: off, never aliased, nothing else moves.
    c.engine_paths.fp32_master_aliasing = false;
    auto q = DecideOffloadPlacement(c, r.host_memory, "dev");
    ASSERT_TRUE(q.ok()) << what;
    EXPECT_FALSE(q->master_aliases_working) << what;
    EXPECT_EQ(q->optimizer_state, r.state) << what;
    EXPECT_EQ(q->params, r.params) << what;
  }
}

// offload_optimizer.delayed_update: the state in HostStateStore on either
// device (on the CPU device its master then stays apart from the working
// copy the forward reads, never aliased); refused naming the key without
// offload_optimizer "cpu", and with offload_param "nvme".
TEST(OffloadPlacement, DelayedUpdateKeepsTheStateInTheHostStore) {
  for (bool host_memory : {true, false}) {
    for (int stage : {1, 2, 3}) {
      Config c;
      c.stage = stage;
      c.dtype = DType::kF32;
      c.offload_optimizer.device = kCpu;
      c.offload_optimizer.delayed_update = true;
      auto p = DecideOffloadPlacement(c, host_memory, "dev");
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(p->optimizer_state, kHost) << stage << host_memory;
      EXPECT_EQ(p->params, kDev) << stage << host_memory;
      EXPECT_FALSE(p->master_aliases_working) << stage << host_memory;
      EXPECT_FALSE(p->grads_on_nvme) << stage << host_memory;
      for (OffloadDevice d : {kNone, kNvmeDev}) {
        c.offload_optimizer.device = d;
        auto q = DecideOffloadPlacement(c, host_memory, "dev");
        ASSERT_FALSE(q.ok()) << stage << host_memory;
        EXPECT_NE(std::string(q.status().message()).find("offload_optimizer.delayed_update"),
                  std::string::npos)
            << q.status();
      }
    }
    Config c;
    c.stage = 3;
    c.offload_optimizer.device = kCpu;
    c.offload_optimizer.delayed_update = true;
    c.offload_param.device = kNvmeDev;
    auto p = DecideOffloadPlacement(c, host_memory, "dev");
    ASSERT_FALSE(p.ok()) << host_memory;
    EXPECT_NE(std::string(p.status().message()).find("offload_param.device"), std::string::npos)
        << p.status();
  }
}

TEST(OffloadPlacement, RefusesOffloadParamBelowStage3) {
  for (int stage = 0; stage <= 2; ++stage) {
    Config c;
    c.stage = stage;
    c.offload_param.device = kCpu;
    auto p = DecideOffloadPlacement(c, false, "dev");
    ASSERT_FALSE(p.ok()) << stage;
    EXPECT_NE(std::string(p.status().message()).find("offload_param"), std::string::npos);
  }
}

// offload_param "nvme" with offload_optimizer "cpu" on a device the host
// cannot touch: the engine refuses it at finalize on every rank, naming
// both keys and the device; the estimator refuses it for a GPU; on the CPU
// device both run it.
TEST(OffloadPlacement, EngineAndEstimatorRefuseTheSamePairing) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  Config c;
  c.stage = 3;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 30;
  c.offload_optimizer.device = kCpu;
  c.offload_param.device = kNvmeDev;
  c.offload_param.nvme_path = std::string(tmp ? tmp : "/tmp") + "/placement";
  std::filesystem::create_directories(c.offload_param.nvme_path);
  MlpSpec spec;
  spec.make_device = [] { return std::make_unique<OffHostDevice>(); };
  std::mutex mu;
  int refused = 0;
  RunThreads(3, [&](int rank, Communicator* comm) {
    auto e = MakeMlpEngine(c, comm, spec);
    std::lock_guard<std::mutex> l(mu);
    ASSERT_FALSE(e.ok()) << "rank " << rank;
    const std::string m(e.status().message());
    EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented) << m;
    EXPECT_NE(m.find("offload_param.device"), std::string::npos) << m;
    EXPECT_NE(m.find("offload_optimizer.device"), std::string::npos) << m;
    EXPECT_NE(m.find("offhost"), std::string::npos) << m;
    ++refused;
  });
  EXPECT_EQ(refused, 3);

  const std::vector<EstimateParam> params = {{1000, 2, true, DType::kF32, 10}};
  auto gpu = EstimateMemory(params, c, {3, 1, /*gpu=*/true});
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(gpu.status().message()).find("offload_param.device"), std::string::npos);
  EXPECT_TRUE(EstimateMemory(params, c, {3, 1, /*gpu=*/false}).ok());

  spec.make_device = nullptr;  // the CPU device
  spec.steps = 2;
  RunThreads(3, [&](int rank, Communicator* comm) {
    auto r = TrainMlp(c, comm, spec);
    std::lock_guard<std::mutex> l(mu);
    EXPECT_TRUE(r.ok()) << "rank " << rank << ": " << r.status();
  });
}

}  // namespace
}  // namespace testing
}  // namespace zero
