// The pairing of communicators and devices, checked on the CPU with stand-ins:
// a device the host "cannot read" makes the engine stage its collectives
// through host memory (the CUDA + MPI path), and a communicator that "moves
// device memory only" makes it stage its scalars through the device (the
// NCCL path). Results must equal the plain CPU engine bit for bit.
#include <gtest/gtest.h>

#include <mutex>

#include "core/backend/staging_communicator.h"
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


// At world 1 every collective is the identity: the staging communicator
// keeps the bytes on the device (one device copy where the output is
// elsewhere, none in place) instead of a round trip through the host, which
// was most of a one-GPU stage-2/3 step (the first H200 run). At world 2
// the host staging buffers are page-locked and kept between collectives.
TEST(DeviceStagingTest, WorldOneStaysOnTheDeviceAndStagingBuffersAreKept) {
  constexpr int64_t n = 1000;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = 0.5f * static_cast<float>(i) - 7.0f;
  {
    OffHostDevice dev;
    auto comms = MakeThreadCommunicators(1);
    auto staged = MakeStagingCommunicator(std::move(comms[0]), &dev);
    float* a = static_cast<float*>(*dev.Allocate(n * sizeof(float)));
    float* b = static_cast<float*>(*dev.Allocate(n * sizeof(float)));
    dev.UploadF32(host.data(), a, DType::kF32, n);
    const int64_t before = OffHostDevice::copied;
    ASSERT_TRUE(staged->ReduceScatterV(a, b, {n}).ok());
    EXPECT_EQ(OffHostDevice::copied - before, n * 4) << "one device copy, no host round trip";
    ASSERT_TRUE(staged->AllReduce(b, n, ReduceOp::kSum).ok());
    ASSERT_TRUE(staged->AllGatherV(b, b, {n}, DType::kF32).ok());
    ASSERT_TRUE(staged->Broadcast(b, n * 4, 0).ok());
    EXPECT_EQ(OffHostDevice::copied - before, n * 4) << "in-place identities copy nothing";
    std::vector<float> out(n);
    dev.DownloadF32(b, DType::kF32, out.data(), n);
    EXPECT_EQ(out, host);
    EXPECT_EQ(dev.memory_stats().pinned_host_bytes, 0);
    dev.Free(a, n * sizeof(float));
    dev.Free(b, n * sizeof(float));
  }
  std::vector<int64_t> pinned(2, -1);
  std::vector<std::vector<float>> got(2);
  RunThreads(2, [&](int rank, Communicator* comm) {
    OffHostDevice dev;
    auto dup = comm->Duplicate();
    ASSERT_TRUE(dup.ok());
    auto staged = MakeStagingCommunicator(std::move(*dup), &dev);
    float* a = static_cast<float*>(*dev.Allocate(n * sizeof(float)));
    dev.UploadF32(host.data(), a, DType::kF32, n);
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(staged->AllReduce(a, n, ReduceOp::kSum).ok());
    got[rank].resize(n);
    dev.DownloadF32(a, DType::kF32, got[rank].data(), n);
    // One page-locked buffer of the collective's size, kept: not one per call.
    pinned[rank] = dev.memory_stats().pinned_host_bytes;
    dev.Free(a, n * sizeof(float));
    staged.reset();
    EXPECT_EQ(dev.memory_stats().pinned_host_bytes, 0) << "freed with the communicator";
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(pinned[r], n * 4) << "rank " << r;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[r][i], 8.0f * host[i]) << "rank " << r << " i " << i;
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
