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
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/backend/standin_comm.h"
#include "core/device/guarded_device.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

Config Cfg(int stage, DType t) {
  Config c = SmallMlpConfig(stage, t);
  c.comm_timeout_seconds = 60;
  return c;
}

void CallerCopy(Device* d, void* dst, const void* src, size_t n) {
  auto* g = dynamic_cast<GuardedDevice*>(d);
  ASSERT_NE(g, nullptr) << "the engine is not on the stand-in device";
  g->CallerCopy(dst, src, n);
}

MlpSpec StandinSpec() {
  MlpSpec s;
  s.steps = 6;
  s.make_device = [] { return std::unique_ptr<Device>(MakeGuardedDevice()); };
  s.caller_copy = CallerCopy;
  return s;
}

enum class CommKind { kThread, kStaging, kNcclShaped };

// `drop_wait`: the NCCL-shaped communicator never learns the compute stream
// (what the device factory did before fix 1).
class NoWaitComm : public Communicator {
 public:
  explicit NoWaitComm(std::unique_ptr<Communicator> c) : c_(std::move(c)) {}
  int rank() const override { return c_->rank(); }
  int world_size() const override { return c_->world_size(); }
  std::string backend_name() const override { return c_->backend_name(); }
  bool device_memory() const override { return true; }
  void set_wait_stream(void*) override {}
  absl::Status AllGatherV(const void* s, void* r, const std::vector<int64_t>& c,
                          DType t) override {
    return c_->AllGatherV(s, r, c, t);
  }
  absl::Status ReduceScatterV(const float* s, float* r, const std::vector<int64_t>& c) override {
    return c_->ReduceScatterV(s, r, c);
  }
  absl::Status AllReduce(float* d, int64_t n, ReduceOp op) override { return c_->AllReduce(d, n, op); }
  absl::Status AllReduce(double* d, int64_t n, ReduceOp op) override { return c_->AllReduce(d, n, op); }
  absl::Status Broadcast(void* d, int64_t b, int root) override { return c_->Broadcast(d, b, root); }
  absl::Status Barrier() override { return c_->Barrier(); }
  void Abort(const std::string& r) override { c_->Abort(r); }
  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override {
    auto d = c_->Duplicate();
    if (!d.ok()) return d.status();
    return std::unique_ptr<Communicator>(std::make_unique<NoWaitComm>(std::move(*d)));
  }

 private:
  std::unique_ptr<Communicator> c_;
};

std::vector<absl::StatusOr<MlpResult>> TrainOn(const Config& c, int world, const MlpSpec& spec,
                                           CommKind kind, bool drop_wait = false) {
  std::vector<absl::StatusOr<MlpResult>> out(world, absl::UnknownError("not run"));
  std::mutex mu;
  RunThreads(world, [&](int rank, Communicator* comm) {
    absl::StatusOr<MlpResult> r;
    if (kind == CommKind::kNcclShaped) {
      auto dup = comm->Duplicate();
      ASSERT_TRUE(dup.ok());
      std::unique_ptr<Communicator> nccl = MakeStandinDeviceComm(std::move(*dup));
      if (drop_wait) nccl = std::make_unique<NoWaitComm>(std::move(nccl));
      r = TrainMlp(c, nccl.get(), spec);
    } else {
      r = TrainMlp(c, comm, spec);
    }
    std::lock_guard<std::mutex> l(mu);
    out[rank] = std::move(r);
  });
  return out;
}

// Params and every step's norm, bit for bit.
void ExpectSame(const std::vector<absl::StatusOr<MlpResult>>& got,
                const std::vector<MlpResult>& ref, const std::string& what) {
  for (size_t r = 0; r < ref.size(); ++r) {
    ASSERT_TRUE(got[r].ok()) << what << " rank " << r << ": " << got[r].status();
    EXPECT_EQ(MaxRelDiff(*got[r], ref[r]), 0.0) << what << " rank " << r;
    ASSERT_EQ(got[r]->steps.size(), ref[r].steps.size()) << what;
    for (size_t i = 0; i < ref[r].steps.size(); ++i) {
      EXPECT_EQ(got[r]->steps[i].grad_norm, ref[r].steps[i].grad_norm) << what << " step " << i;
      EXPECT_EQ(got[r]->steps[i].skipped, ref[r].steps[i].skipped) << what << " step " << i;
    }
  }
}

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
