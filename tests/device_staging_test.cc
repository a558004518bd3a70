// The pairing of communicators and devices, checked on the CPU with stand-ins:
// a device the host "cannot read" makes the engine stage its collectives
// through host memory (the CUDA + MPI path), and a communicator that "moves
// device memory only" makes it stage its scalars through the device (the
// NCCL path). Results must equal the plain CPU engine bit for bit.
#include <gtest/gtest.h>

#include <mutex>

#include "core/backend/standin_comm.h"
#include "core/comm/thread_communicator.h"
#include "tests/testing/off_host_device.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

// A thread communicator that moves device memory only, as NCCL: the
// NCCL-shaped stand-in (core/backend/standin_comm.h), which reaches the
// guarded stand-in's memory through its aliases and refuses host memory, so
// a scalar the engine did not stage through the device fails the run. (A
// plain forwarding wrapper here handed device pointers to the host
// communicator, which only worked while the stand-in's memory was host
// memory.)
std::unique_ptr<Communicator> DeviceOnly(Communicator* comm) {
  auto dup = comm->Duplicate();
  if (!dup.ok()) return nullptr;
  return MakeStandinDeviceComm(std::move(*dup));
}

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

std::vector<MlpResult> Train(const Config& c, int world, const MlpSpec& spec, bool device_comm) {
  std::vector<MlpResult> out(world);
  std::mutex mu;
  RunThreads(world, [&](int rank, Communicator* comm) {
    absl::StatusOr<MlpResult> r;
    if (device_comm) {
      // Borrow the thread communicator through a device-only view of a duplicate.
      std::unique_ptr<Communicator> dc = DeviceOnly(comm);
      ASSERT_NE(dc, nullptr);
      r = TrainMlp(c, dc.get(), spec);
    } else {
      r = TrainMlp(c, comm, spec);
    }
    std::lock_guard<std::mutex> l(mu);
    EXPECT_TRUE(r.ok()) << "rank " << rank << ": " << r.status();
    if (r.ok()) out[rank] = std::move(*r);
  });
  return out;
}

TEST(DeviceStagingTest, HostCommunicatorOverDeviceMemoryStagesThroughHost) {
  for (int stage = 0; stage <= 3; ++stage) {
    MlpSpec plain;
    MlpSpec offhost;
    offhost.make_device = [] { return std::make_unique<OffHostDevice>(); };
    auto ref = Train(Cfg(stage), 3, plain, false);
    const int64_t before = OffHostDevice::copied;
    auto got = Train(Cfg(stage), 3, offhost, false);
    EXPECT_GT(OffHostDevice::copied - before, 0) << "no staging copies at stage " << stage;
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(MaxRelDiff(got[r], ref[r]), 0.0) << "stage " << stage << " rank " << r;
      // Traffic is accounted the same through the staging layer.
      EXPECT_EQ(got[r].stats.sent[0] + got[r].stats.sent[1] + got[r].stats.sent[2],
                ref[r].stats.sent[0] + ref[r].stats.sent[1] + ref[r].stats.sent[2]);
    }
  }
}

TEST(DeviceStagingTest, DeviceCommunicatorGetsScalarsStagedThroughDevice) {
  for (int stage = 0; stage <= 3; ++stage) {
    MlpSpec plain;
    MlpSpec dev;
    dev.make_device = [] { return std::make_unique<OffHostDevice>(); };
    auto ref = Train(Cfg(stage), 2, plain, false);
    auto got = Train(Cfg(stage), 2, dev, true);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(MaxRelDiff(got[r], ref[r]), 0.0) << "stage " << stage << " rank " << r;
    }
  }
}

TEST(DeviceStagingTest, DeviceCommunicatorWithHostDeviceIsAnError) {
  std::vector<absl::Status> st(2);
  RunThreads(2, [&](int rank, Communicator* comm) {
    std::unique_ptr<Communicator> dc = DeviceOnly(comm);
    ASSERT_NE(dc, nullptr);
    st[rank] = TrainMlp(Cfg(2), dc.get(), MlpSpec{}).status();
  });
  for (const auto& s : st) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("moves GPU memory but the engine's device is cpu"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
