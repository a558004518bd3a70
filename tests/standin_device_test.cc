// The guarded, asynchronous stand-in for a GPU
// (core/device/guarded_device.h): device memory the host cannot touch, work that runs on a worker
// only when waited for. Over it the engine must train bit for bit like the
// plain CPU engine, through the staging communicator (a host communicator
// over device memory) and the NCCL-shaped one (core/backend/standin_comm.h),
// with the caller's copies NOT ordered with the device's queue. Each bug the
// first GPU run found that the CPU can show has a case here that fails
// without its fix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/backend/standin_comm.h"
#include "core/device/guarded_device.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/standin_training.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

TEST(StandinDevice, HostDereferenceOfDeviceMemoryCrashes) {
  auto d = MakeGuardedDevice();
  auto p = d->Allocate(64);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(GuardedDevice::IsDeviceMemory(*p));
  EXPECT_TRUE(GuardedDevice::IsDeviceMemory(static_cast<char*>(*p) + 63));
  float host = 3.0f;
  EXPECT_FALSE(GuardedDevice::IsDeviceMemory(&host));
  // Through the device: fine.
  d->Copy(*p, &host, sizeof(host));
  float back = 0.0f;
  d->Copy(&back, *p, sizeof(back));
  EXPECT_EQ(back, 3.0f);
  // Directly: SIGSEGV, as on a GPU.
  EXPECT_DEATH({ std::printf("%f\n", *static_cast<volatile float*>(*p)); }, "");
  d->Free(*p, 64);
}

TEST(StandinDevice, WorkRunsOnlyWhenWaitedFor) {
  auto d = MakeGuardedDevice();
  auto p = d->Allocate(16);
  ASSERT_TRUE(p.ok());
  const float ones[4] = {1, 1, 1, 1};
  d->Copy(*p, ones, sizeof(ones));
  d->Memset0(*p, sizeof(ones));  // queued
  EXPECT_EQ(d->pending(), 1);
  float seen[4];
  d->CallerCopy(seen, *p, sizeof(seen));  // not ordered: the fill has not run
  EXPECT_EQ(seen[0], 1.0f);
  d->Synchronize();
  EXPECT_EQ(d->pending(), 0);
  d->CallerCopy(seen, *p, sizeof(seen));
  EXPECT_EQ(seen[0], 0.0f);
  // A kernel given host memory is a device error, not a host write.
  float host[4] = {1, 2, 3, 4};
  d->Memset0(host, sizeof(host));
  d->Synchronize();
  EXPECT_EQ(host[3], 4.0f);
  EXPECT_FALSE(d->status().ok());
  EXPECT_NE(d->status().message().find("host memory"), std::string::npos) << d->status();
  d->Free(*p, 16);
}

// The matrix: stage x precision x offload x world x communicator, each equal
// to the plain CPU engine bit for bit.
TEST(StandinDevice, MatrixEqualsPlainCpuEngineBitwise) {
  for (int world : {1, 2, 3}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (bool offload : {false, true}) {
          Config c = Cfg(stage, t);
          if (offload) c.offload_optimizer.device = OffloadDevice::kCpu;
          MlpSpec plain;
          plain.steps = 6;
          Config pc = Cfg(stage, t);  // offload_optimizer cpu on the CPU device: in memory
          std::vector<MlpResult> ref = TrainAll(pc, world, plain);
          for (CommKind k : {CommKind::kStaging, CommKind::kNcclShaped}) {
            const std::string what = absl::StrCat(
                "world ", world, " stage ", stage, " ", DTypeName(t), offload ? " offload" : "",
                k == CommKind::kStaging ? " staging" : " nccl-shaped");
            ExpectSame(TrainOn(c, world, StandinSpec(), k), ref, what);
          }
        }
      }
    }
  }
}

// Hybrid sharding and ZeRO++ on the device path (the communicator's Split
// and all-to-all; ncclCommSplit / grouped send-recv on a GPU): 2 "nodes" x 2
// ranks, each mode equal to the same mode on the plain CPU engine bit for
// bit, with every device buffer behind the stand-in's trap.
TEST(StandinDevice, HierarchicalModesEqualPlainCpuEngineBitwise) {
  struct Mode {
    const char* name;
    int stage;
    DType t;
    void (*set)(Config*);
  };
  const Mode modes[] = {
      {"hybrid S=2 stage 2", 2, DType::kF32, [](Config* c) { c->mics_shard_size = 2; }},
      {"hybrid S=2 stage 3 bf16", 3, DType::kBF16, [](Config* c) { c->mics_shard_size = 2; }},
      {"hpZ P=2", 3, DType::kF16, [](Config* c) { c->hpz_partition_size = 2; }},
      {"qwZ", 3, DType::kBF16, [](Config* c) { c->quantized_weights = true; }},
      {"qgZ int4 + qwZ + hpZ", 3, DType::kF32,
       [](Config* c) {
         c->quantized_gradients = true;
         c->quantized_gradients_bits = 4;
         c->quantized_weights = true;
         c->hpz_partition_size = 2;
       }},
  };
  for (const Mode& m : modes) {
    Config c = Cfg(m.stage, m.t);
    c.ranks_per_node = 2;
    m.set(&c);
    MlpSpec plain;
    plain.steps = 6;
    std::vector<MlpResult> ref = TrainAll(c, 4, plain);
    ExpectSame(TrainOn(c, 4, StandinSpec(), CommKind::kNcclShaped), ref, m.name);
  }
  // A host communicator under the device (the staging path) cannot carry
  // the sub-groups: refused at finalize on every rank, not run on the host.
  Config h = Cfg(2, DType::kF32);
  h.ranks_per_node = 2;
  h.mics_shard_size = 2;
  for (const auto& r : TrainOn(h, 4, StandinSpec(), CommKind::kStaging)) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("need a device communicator"), std::string::npos)
        << r.status();
  }
}

// Fix 1: without the compute stream to wait on, the NCCL-shaped communicator
// reads pack buffers before their casts ran: training goes wrong.
TEST(StandinDevice, NcclThatDoesNotWaitForComputeGoesWrong) {
  Config c = Cfg(2, DType::kBF16);
  MlpSpec plain;
  plain.steps = 6;
  std::vector<MlpResult> ref = TrainAll(c, 2, plain);
  auto bad = TrainOn(c, 2, StandinSpec(), CommKind::kNcclShaped, /*drop_wait=*/true);
  bool differs = false;
  for (int r = 0; r < 2; ++r) {
    differs = differs || !bad[r].ok() || MaxRelDiff(*bad[r], ref[r]) != 0.0;
  }
  EXPECT_TRUE(differs) << "the stand-in did not expose a missing wait";
  ExpectSame(TrainOn(c, 2, StandinSpec(), CommKind::kNcclShaped), ref, "with the wait");
}

// Fix 2: a failed kernel is an engine error naming the device, not a NaN
// norm read as an fp16 overflow (a skipped step forever in fp32).
TEST(StandinDevice, KernelFailureIsAnEngineError) {
  for (DType t : {DType::kF32, DType::kF16}) {
    RunThreads(1, [&](int, Communicator* comm) {
      MlpSpec spec = StandinSpec();
      int calls = 0;
      spec.hook = [&](Engine* e, int step, int index) -> absl::Status {
        if (step == 2 && index == -1 && calls++ == 0) {
          dynamic_cast<GuardedDevice*>(e->device())->FailNextKernel("test");
        }
        return absl::OkStatus();
      };
      auto r = TrainMlp(Cfg(0, t), comm, spec);
      ASSERT_FALSE(r.ok()) << DTypeName(t) << ": training went on after a failed kernel";
      EXPECT_NE(r.status().message().find("device standin failed"), std::string::npos)
          << r.status();
      EXPECT_NE(r.status().message().find("injected launch failure"), std::string::npos)
          << r.status();
    });
  }
}

// Fix 3 is the matrix itself (caller copies unordered with the queue); this
// shows the harness's copies do race with the queue when the engine does
// not wait: a pointer read before Synchronize sees the old bytes.
TEST(StandinDevice, CallerCopiesAreNotOrderedWithTheQueue) {
  auto d = MakeGuardedDevice();
  auto p = d->Allocate(8);
  ASSERT_TRUE(p.ok());
  const double v = 2.5;
  d->CallerCopy(*p, &v, sizeof(v));
  d->Memset0(*p, sizeof(v));
  double seen = 0;
  d->CallerCopy(&seen, *p, sizeof(seen));
  EXPECT_EQ(seen, 2.5);
  d->Synchronize();
  d->CallerCopy(&seen, *p, sizeof(seen));
  EXPECT_EQ(seen, 0.0);
  d->Free(*p, 8);
}

// Fix 4: checkpoints with ZeRO-Offload state (host memory beside the device):
// save, and load with and without optimizer states, resume bit for bit.
TEST(StandinDevice, CheckpointWithOffloadedStateResumesBitwise) {
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                   "/standin_ckpt");
  std::filesystem::remove_all(dir);
  for (int stage : {1, 3}) {
    Config c = Cfg(stage, DType::kBF16);
    c.offload_optimizer.device = OffloadDevice::kCpu;
    MlpSpec full = StandinSpec();
    full.ckpt_dir = dir;
    full.save_after = 3;
    full.save_tag = absl::StrCat("s", stage);
    auto whole = TrainOn(c, 2, full, CommKind::kNcclShaped);
    MlpSpec resume = StandinSpec();
    resume.resume_dir = dir;
    resume.resume_tag = full.save_tag;
    auto resumed = TrainOn(c, 2, resume, CommKind::kNcclShaped);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(whole[r].ok()) << whole[r].status();
      ASSERT_TRUE(resumed[r].ok()) << resumed[r].status();
      EXPECT_EQ(MaxRelDiff(*resumed[r], *whole[r]), 0.0) << "stage " << stage << " rank " << r;
    }
    // Without optimizer states the moments are zero-filled where they live
    // (host memory): no device call on host memory, and training goes on.
    resume.load_options.load_optimizer_states = false;
    auto fresh = TrainOn(c, 2, resume, CommKind::kNcclShaped);
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(fresh[r].ok()) << fresh[r].status();
  }
}

// Checkpoints of device state across devices, every stage x fp32/bf16 x
// offload_optimizer none/cpu, 2 ranks on the NCCL-shaped communicator: a
// tag saved on the stand-in resumes there bit for bit, and the plain CPU
// engine resumes it bit for bit too (the files hold the device's values,
// read through Download); a tag saved by the CPU engine resumes on the
// stand-in the same way.
TEST(StandinDevice, CheckpointsMoveBetweenStandinAndCpuBitwise) {
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                   "/standin_ckpt_cross");
  std::filesystem::remove_all(dir);
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      for (bool offload : {false, true}) {
        Config c = Cfg(stage, t);
        if (offload) c.offload_optimizer.device = OffloadDevice::kCpu;
        const std::string what = absl::StrCat("stage ", stage, " ", DTypeName(t),
                                              offload ? " offload_optimizer cpu" : "");
        const std::string tag = absl::StrCat("s", stage, DTypeName(t), offload);
        // The CPU engine: the whole run, saving at step 3 (offload_optimizer
        // cpu is in memory there).
        MlpSpec cpu_full;
        cpu_full.steps = 6;
        cpu_full.ckpt_dir = dir;
        cpu_full.save_after = 3;
        cpu_full.save_tag = "cpu" + tag;
        std::vector<MlpResult> ref = TrainAll(Cfg(stage, t), 2, cpu_full);
        MlpSpec dev_full = StandinSpec();
        dev_full.ckpt_dir = dir;
        dev_full.save_after = 3;
        dev_full.save_tag = "dev" + tag;
        ExpectSame(TrainOn(c, 2, dev_full, CommKind::kNcclShaped), ref, what + " whole");
        for (const char* from : {"dev", "cpu"}) {
          MlpSpec on_dev = StandinSpec();
          on_dev.resume_dir = dir;
          on_dev.resume_tag = from + tag;
          auto got = TrainOn(c, 2, on_dev, CommKind::kNcclShaped);
          MlpSpec on_cpu;
          on_cpu.steps = 6;
          on_cpu.resume_dir = dir;
          on_cpu.resume_tag = from + tag;
          std::vector<MlpResult> cpu_resumed = TrainAll(Cfg(stage, t), 2, on_cpu);
          for (int r = 0; r < 2; ++r) {
            ASSERT_TRUE(got[r].ok()) << what << " from " << from << ": " << got[r].status();
            EXPECT_EQ(MaxRelDiff(*got[r], ref[r]), 0.0)
                << what << ": " << from << " tag resumed on the stand-in, rank " << r;
            EXPECT_EQ(MaxRelDiff(cpu_resumed[r], ref[r]), 0.0)
                << what << ": " << from << " tag resumed on the CPU, rank " << r;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
