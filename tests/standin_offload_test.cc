// ZeRO-Offload with the engine's state on the guarded stand-in for a GPU
// (core/device/guarded_device.h): offload_param "cpu" (and "nvme" under
// hybrid sharding) and offload_optimizer "nvme" with device state, each bit
// for bit like the plain CPU engine (tests/testing/standin_training.h), the
// device's bytes and pinned staging counted.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/device/guarded_device.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/standin_training.h"

namespace zero {
namespace testing {
namespace {

// offload_param "cpu" with device state (stage 3): the own working shard in
// host memory, uploaded for each gather, written back through device
// staging after the update. Bitwise equal to the plain CPU engine at every
// precision x world x communicator x offload_optimizer, pinned or not; the
// device holds exactly the shard's bytes less than without it.
TEST(StandinDevice, OffloadParamCpuEqualsPlainCpuEngineBitwise) {
  bool pin = false;
  for (int world : {1, 2, 3}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (bool offload_opt : {false, true}) {
        MlpSpec plain;
        plain.steps = 6;
        std::vector<MlpResult> ref = TrainAll(Cfg(3, t), world, plain);
        Config c = Cfg(3, t);
        c.offload_param.device = OffloadDevice::kCpu;
        c.offload_param.pin_memory = pin = !pin;
        if (offload_opt) c.offload_optimizer.device = OffloadDevice::kCpu;
        for (CommKind k : {CommKind::kStaging, CommKind::kNcclShaped}) {
          const std::string what = absl::StrCat(
              "world ", world, " ", DTypeName(t), offload_opt ? " offload_optimizer" : "",
              pin ? " pinned" : "", k == CommKind::kStaging ? " staging" : " nccl-shaped");
          ExpectSame(TrainOn(c, world, StandinSpec(), k), ref, what);
        }
      }
    }
  }
}

// offload_param "cpu" along the prefetch trace: a prefetched gather's own
// slice goes up on the stand-in's copy stream when the prefetch is
// scheduled, and the gather waits for its event. The copy queue runs only
// when the compute queue reaches that wait, so a gather that did not wait
// all-gathers unwritten bytes and the copies land later in freed device
// memory (checked: without the wait this test dies, SIGSEGV); bitwise equal to the plain CPU
// engine, with async uploads actually issued (none before: the upload was a
// synchronous Copy on the comm-stream thread).
TEST(StandinDevice, OffloadParamCpuUploadsOnTheCopyStreamAlongThePrefetchTrace) {
  for (int world : {1, 2}) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      MlpSpec plain;
      plain.steps = 6;
      std::vector<MlpResult> ref = TrainAll(Cfg(3, t), world, plain);
      Config c = Cfg(3, t);
      c.offload_param.device = OffloadDevice::kCpu;
      c.offload_param.pin_memory = true;
      for (CommKind k : {CommKind::kStaging, CommKind::kNcclShaped}) {
        MlpSpec spec = StandinSpec();
        std::mutex mu;
        std::vector<int64_t> issued(world, -1);
        spec.hook = [&](Engine* e, int step, int index) -> absl::Status {
          if (step == 5 && index == -1) {
            auto* g = dynamic_cast<GuardedDevice*>(e->device());
            std::lock_guard<std::mutex> l(mu);
            issued[e->Stats().rank] = g ? g->async_uploads_issued() : -1;
          }
          return absl::OkStatus();
        };
        const std::string what = absl::StrCat("world ", world, " ", DTypeName(t),
                                              k == CommKind::kStaging ? " staging" : " nccl-shaped");
        ExpectSame(TrainOn(c, world, spec, k), ref, what);
        for (int r = 0; r < world; ++r) EXPECT_GT(issued[r], 0) << what << " rank " << r;
      }
    }
  }
}

// Every param persistent: their refresh after each step goes in coalesced
// all-gathers, whose own slices come from the host shard (offload_param
// cpu leaves the device working copy empty; reading it instead read past a
// heap block under ASan and dies on the stand-in). Bitwise the plain engine.
TEST(StandinDevice, OffloadParamCpuPersistentParamsEqualPlainCpuEngineBitwise) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    MlpSpec plain;
    plain.steps = 6;
    std::vector<MlpResult> ref = TrainAll(Cfg(3, t), 2, plain);
    Config c = Cfg(3, t);
    c.offload_param.device = OffloadDevice::kCpu;
    c.stage3_param_persistence_threshold = 1 << 20;
    for (CommKind k : {CommKind::kStaging, CommKind::kNcclShaped}) {
      ExpectSame(TrainOn(c, 2, StandinSpec(), k), ref,
                 absl::StrCat(DTypeName(t), k == CommKind::kStaging ? " staging" : " nccl-shaped"));
    }
  }
}

// offload_param "cpu" and "nvme" with device state under hybrid sharding
// and ZeRO++: the own shard is host memory (or read into it), so qwZ's
// quantized gather must upload it before its device kernels cast and
// quantize it (it handed them host memory: a GPU faults, the stand-in
// records "given host memory"). Each mode bitwise equal to the same mode
// in memory on the plain CPU engine.
TEST(StandinDevice, OffloadParamWithHierarchicalModesEqualsPlainCpuEngineBitwise) {
  const std::string root =
      absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                   "/standin_param_hier");
  int n = 0;
  struct Mode {
    const char* name;
    DType t;
    void (*set)(Config*);
  };
  const Mode modes[] = {
      {"hybrid S=2", DType::kBF16, [](Config* c) { c->mics_shard_size = 2; }},
      {"hpZ P=2", DType::kF16, [](Config* c) { c->hpz_partition_size = 2; }},
      {"qwZ", DType::kBF16, [](Config* c) { c->quantized_weights = true; }},
      {"qwZ fp32", DType::kF32, [](Config* c) { c->quantized_weights = true; }},
      {"qgZ int8 + hpZ", DType::kF32,
       [](Config* c) {
         c->quantized_gradients = true;
         c->hpz_partition_size = 2;
       }},
  };
  for (const Mode& m : modes) {
    Config c = Cfg(3, m.t);
    c.ranks_per_node = 2;
    m.set(&c);
    MlpSpec plain;
    plain.steps = 6;
    std::vector<MlpResult> ref = TrainAll(c, 4, plain);
    for (OffloadDevice where : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
      Config o = c;
      o.offload_param.device = where;
      if (where == OffloadDevice::kNvme) {
        o.offload_param.nvme_path = absl::StrCat(root, "/", n++);
        std::filesystem::create_directories(o.offload_param.nvme_path);
      }
      o.comm_timeout_seconds = 10;  // a rank that fails leaves its peers waiting
      ExpectSame(TrainOn(o, 4, StandinSpec(), CommKind::kNcclShaped), ref,
                 absl::StrCat(m.name, " offload_param ", OffloadDeviceName(where)));
    }
  }
}

TEST(StandinDevice, OffloadParamCpuFreesTheShardOnTheDevice) {
  for (int world : {1, 3}) {
    // Device bytes before step 1 (nothing gathered, nothing in flight) and
    // the shard bytes the layout gives this rank.
    std::vector<int64_t> device_bytes[2], shard_bytes(world);
    for (int off = 0; off < 2; ++off) {
      Config c = Cfg(3, DType::kBF16);
      c.stage3_max_live_parameters = 250;  // fc1.weight (200) and a little more
      if (off) c.offload_param.device = OffloadDevice::kCpu;
      c.offload_param.pin_memory = off == 1;
      device_bytes[off].assign(world, -1);
      MlpSpec spec = StandinSpec();
      std::mutex mu;
      spec.hook = [&](Engine* e, int step, int index) -> absl::Status {
        if (step == 1 && index == -1) {
          int64_t shard = 0;
          for (const LayoutGroup& g : e->layout().groups()) shard += g.shard * 2;  // bf16
          std::lock_guard<std::mutex> l(mu);
          const int rank = e->Stats().rank;
          device_bytes[off][rank] = static_cast<int64_t>(e->device()->allocated_bytes());
          shard_bytes[rank] = shard;
          // The stats a GPU reports: the pinned host shard, the high water.
          const DeviceMemoryStats m = e->device()->memory_stats();
          EXPECT_EQ(m.pinned_host_bytes, off ? shard : 0) << "rank " << rank;
          EXPECT_EQ(m.bytes, device_bytes[off][rank]);
          EXPECT_GE(m.peak_bytes, m.bytes);
        }
        return absl::OkStatus();
      };
      auto r = TrainOn(c, world, spec, CommKind::kNcclShaped);
      for (int rank = 0; rank < world; ++rank) {
        ASSERT_TRUE(r[rank].ok()) << r[rank].status();
        // The live budget holds for the gathered params on the device.
        EXPECT_LE(r[rank]->stats.live_gathered_high_water,
                  c.stage3_max_live_parameters * 2) << "rank " << rank;
        EXPECT_GE(r[rank]->stats.live_gathered_high_water, 200 * 2);
      }
    }
    for (int rank = 0; rank < world; ++rank) {
      ASSERT_GT(shard_bytes[rank], 0);
      EXPECT_EQ(device_bytes[0][rank] - device_bytes[1][rank], shard_bytes[rank])
          << "world " << world << " rank " << rank;
    }
  }
}

// offload_optimizer "nvme" with device state: NVMe <-> host staging <->
// device per piece, bitwise equal to the plain CPU engine (same config) at
// every stage and precision, worlds 1 and 2, with offload_param cpu at stage
// 3 too; a checkpoint (state read through host memory) resumes bitwise.
TEST(StandinDevice, NvmeOptimizerStateEqualsPlainCpuEngineBitwise) {
  const std::string root =
      absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                   "/standin_nvme");
  for (int world : {1, 2}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (bool param_cpu : {false, true}) {
          if (param_cpu && stage != 3) continue;
          Config c = Cfg(stage, t);
          c.offload_optimizer.device = OffloadDevice::kNvme;
          c.sub_group_size = 37;  // several pieces per group
          if (param_cpu) c.offload_param.device = OffloadDevice::kCpu;
          // The reference: the same config on the plain CPU device (NVMe
          // pieces sum the norm in their own order; the params match the
          // in-memory run too, //tests:nvme_offload_test).
          MlpSpec plain;
          plain.steps = 6;
          Config pc = c;
          pc.offload_optimizer.nvme_path = absl::StrCat(root, "/cpu_w", world, "s", stage);
          std::filesystem::create_directories(pc.offload_optimizer.nvme_path);
          std::vector<MlpResult> ref = TrainAll(pc, world, plain);
          c.offload_optimizer.nvme_path = absl::StrCat(root, "/w", world, "s", stage);
          std::filesystem::create_directories(c.offload_optimizer.nvme_path);
          const std::string what = absl::StrCat("world ", world, " stage ", stage, " ",
                                                DTypeName(t), param_cpu ? " offload_param cpu" : "");
          ExpectSame(TrainOn(c, world, StandinSpec(), CommKind::kNcclShaped), ref, what);
        }
      }
    }
  }
  // Checkpoints: save at step 3, resume, bitwise equal to the whole run.
  const std::string dir = root + "/ckpt";
  Config c = Cfg(3, DType::kBF16);
  c.offload_optimizer.device = OffloadDevice::kNvme;
  c.offload_optimizer.nvme_path = root + "/ck";
  std::filesystem::create_directories(c.offload_optimizer.nvme_path);
  MlpSpec full = StandinSpec();
  full.ckpt_dir = dir;
  full.save_after = 3;
  full.save_tag = "nvme";
  auto whole = TrainOn(c, 2, full, CommKind::kNcclShaped);
  MlpSpec resume = StandinSpec();
  resume.resume_dir = dir;
  resume.resume_tag = "nvme";
  auto resumed = TrainOn(c, 2, resume, CommKind::kNcclShaped);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(whole[r].ok()) << whole[r].status();
    ASSERT_TRUE(resumed[r].ok()) << resumed[r].status();
    EXPECT_EQ(MaxRelDiff(*resumed[r], *whole[r]), 0.0) << "rank " << r;
  }
}

// offload_optimizer "nvme" with device state and pin_memory: the tier's
// O_DIRECT buffers are the host staging, page-locked through the device
// (NVMe <-> pinned host <-> device): the device's stats count them (they
// were plain aligned_alloc, 0 pinned bytes), without pin_memory nothing is
// pinned, and both stay bitwise equal to the plain CPU engine. Piece k+1
// goes up on the copy stream while piece k is updated.
TEST(StandinDevice, NvmeOptimizerStagingIsPinnedThroughTheDevice) {
  const std::string root =
      absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                   "/standin_nvme_pinned");
  for (int world : {1, 2}) {
    for (bool pin : {false, true}) {
      Config c = Cfg(2, DType::kBF16);
      c.offload_optimizer.device = OffloadDevice::kNvme;
      c.offload_optimizer.pin_memory = pin;
      c.sub_group_size = 37;  // several pieces, buffer_count buffers
      const std::string tag = absl::StrCat("w", world, pin ? "pin" : "plain");
      Config pc = c;
      pc.offload_optimizer.nvme_path = absl::StrCat(root, "/cpu_", tag);
      std::filesystem::create_directories(pc.offload_optimizer.nvme_path);
      MlpSpec plain;
      plain.steps = 6;
      std::vector<MlpResult> ref = TrainAll(pc, world, plain);
      c.offload_optimizer.nvme_path = absl::StrCat(root, "/", tag);
      std::filesystem::create_directories(c.offload_optimizer.nvme_path);
      MlpSpec spec = StandinSpec();
      std::mutex mu;
      int checked = 0;
      spec.hook = [&](Engine* e, int step, int index) -> absl::Status {
        if (step == 2 && index == -1) {
          const int64_t staging = e->Stats().optimizer_bytes;  // the tier's buffers
          const int64_t pinned = e->device()->memory_stats().pinned_host_bytes;
          auto* g = dynamic_cast<GuardedDevice*>(e->device());
          std::lock_guard<std::mutex> l(mu);
          ++checked;
          EXPECT_GT(staging, 0);
          // Pieces after the first went up on the copy stream while the
          // one before was updated (NVMe <-> pinned host <-> device,
          // pipelined); a piece that did not wait for its upload would
          // update stale bytes (the copy queue runs only at the wait).
          EXPECT_GT(g ? g->async_uploads_issued() : -1, 0) << "rank " << e->Stats().rank;
          if (pin) {
            // Each buffer is asked for with 4 KiB to spare, for O_DIRECT's
            // alignment.
            EXPECT_GE(pinned, staging) << "rank " << e->Stats().rank;
            EXPECT_LE(pinned, staging + c.offload_optimizer.buffer_count * 4096);
          } else {
            EXPECT_EQ(pinned, 0) << "rank " << e->Stats().rank;
          }
        }
        return absl::OkStatus();
      };
      ExpectSame(TrainOn(c, world, spec, CommKind::kNcclShaped), ref,
                 absl::StrCat("nvme staging world ", world, pin ? " pinned" : " plain"));
      EXPECT_EQ(checked, world);
    }
  }
}

// offload_param "nvme" with device state (stage 3): the own shard in param
// files read through host staging and uploaded for each gather, the update
// written from device staging; with offload_optimizer none / nvme (cpu is
// refused by name),
// bitwise equal to the same config on the plain CPU device; a checkpoint
// resumes bitwise.
TEST(StandinDevice, NvmeParamsEqualPlainCpuEngineBitwise) {
  const std::string root =
      absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                   "/standin_nvme_params");
  int n = 0;
  for (int world : {1, 2}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (OffloadDevice opt : {OffloadDevice::kNone, OffloadDevice::kNvme}) {
        Config c = Cfg(3, t);
        c.offload_param.device = OffloadDevice::kNvme;
        c.offload_optimizer.device = opt;
        c.sub_group_size = 37;
        auto dirs = [&](Config* k, const std::string& who) {
          k->offload_param.nvme_path = absl::StrCat(root, "/", who, "p", n);
          k->offload_optimizer.nvme_path = absl::StrCat(root, "/", who, "o", n);
          std::filesystem::create_directories(k->offload_param.nvme_path);
          std::filesystem::create_directories(k->offload_optimizer.nvme_path);
        };
        ++n;
        Config pc = c;
        dirs(&pc, "cpu");
        MlpSpec plain;
        plain.steps = 6;
        std::vector<MlpResult> ref = TrainAll(pc, world, plain);
        dirs(&c, "dev");
        const std::string what = absl::StrCat("world ", world, " ", DTypeName(t), " optimizer ",
                                              OffloadDeviceName(opt));
        ExpectSame(TrainOn(c, world, StandinSpec(), CommKind::kNcclShaped), ref, what);
      }
    }
  }
  {
    Config c = Cfg(3, DType::kBF16);
    c.offload_param.device = OffloadDevice::kNvme;
    c.offload_param.nvme_path = root + "/refused";
    c.offload_optimizer.device = OffloadDevice::kCpu;
    std::filesystem::create_directories(c.offload_param.nvme_path);
    auto r = TrainOn(c, 1, StandinSpec(), CommKind::kStaging);
    ASSERT_FALSE(r[0].ok());
    EXPECT_EQ(r[0].status().code(), absl::StatusCode::kUnimplemented) << r[0].status();
    EXPECT_NE(r[0].status().message().find("offload_optimizer.device \"cpu\""), std::string::npos)
        << r[0].status();
  }
  Config c = Cfg(3, DType::kBF16);
  c.offload_param.device = OffloadDevice::kNvme;
  c.offload_param.nvme_path = root + "/ck";
  std::filesystem::create_directories(c.offload_param.nvme_path);
  MlpSpec full = StandinSpec();
  full.ckpt_dir = root + "/ckpt";
  full.save_after = 3;
  full.save_tag = "p";
  auto whole = TrainOn(c, 2, full, CommKind::kNcclShaped);
  MlpSpec resume = StandinSpec();
  resume.resume_dir = root + "/ckpt";
  resume.resume_tag = "p";
  auto resumed = TrainOn(c, 2, resume, CommKind::kNcclShaped);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(whole[r].ok()) << whole[r].status();
    ASSERT_TRUE(resumed[r].ok()) << resumed[r].status();
    EXPECT_EQ(MaxRelDiff(*resumed[r], *whole[r]), 0.0) << "rank " << r;
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
