// Injected IO faults (core/common/io_fault.h) under the NVMe tiers and the
// checkpoint writer and reader, at three thread ranks. For each fault ×
// where it hits: the call fails on EVERY rank (none hangs; comm_timeout is
// 20 s and each scenario must end well before it), the rank that hit it
// names the file, a failed NVMe step names the last checkpoint, the last
// checkpoint and `latest` stay intact, and a new engine that loads it ends
// bitwise where the uninterrupted run ends. Short reads and writes are
// completed and change no bit. A crash (SIGKILL) before any write, fsync or
// rename of the save protocol leaves `latest` naming a whole tag.
// The gradient-accumulation read of ZeRO-Infinity's gradient files is aimed
// by count (GradAccumReadFault, world 1 and 3). A failed engine refuses
// further calls. One JSON line per scenario (fault, outcome, seconds).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/file_util.h"
#include "core/comm/thread_communicator.h"
#include "core/common/io_fault.h"
#include "core/engine/engine.h"
#include "tests/testing/aiming_device.h"
#include "tests/testing/fresh_dir.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

constexpr int kWorld = 3;  // the scenarios' default

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Config Base(int stage, DType dtype, const std::string& nvme, bool optimizer, bool params) {
  Config c = SmallMlpConfig(stage, dtype);
  c.sub_group_size = 96;
  c.comm_timeout_seconds = 20;
  if (optimizer) {
    c.offload_optimizer.device = OffloadDevice::kNvme;
    c.offload_optimizer.nvme_path = nvme;
    c.offload_optimizer.buffer_count = 3;
  }
  if (params) {
    c.offload_param.device = OffloadDevice::kNvme;
    c.offload_param.nvme_path = nvme;
  }
  return c;
}

void ExpectSameParams(const MlpResult& a, const MlpResult& b, const std::string& what) {
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_EQ(a.params[i], b.params[i]) << what << ": " << a.names[i];
  }
}

struct Scenario {
  std::string name;
  Config config;
  // Armed by rank 0 before step `at_step` (-1 in the hook).
  std::string fault;
  int at_step = 4;
  // Where it hits: "step" (training), "save" (a save at at_step), "load"
  // (loading the checkpoint).
  std::string phase = "step";
  int fault_rank = 1;
  // Expected on the rank that hit it (in its message).
  std::vector<std::string> names;
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  bool recovers = false;  // short transfers: training simply succeeds
  int world = kWorld;
};

void Report(const Scenario& s, const std::string& outcome, double seconds) {
  std::printf("{\"bench\": \"io_fault\", \"scenario\": \"%s\", \"fault\": \"%s\", "
              "\"phase\": \"%s\", \"outcome\": \"%s\", \"seconds\": %.2f}\n",
              s.name.c_str(), s.fault.c_str(), s.phase.c_str(), outcome.c_str(), seconds);
}

// Trains 8 steps with a checkpoint "mid" saved after step 2 (a "late" one at
// at_step in the save phase), arming the fault at at_step; returns each
// rank's status.
// A failed rank's engine must then refuse every call (its error in
// `refused`, empty when it took one).
std::vector<absl::Status> RunWithFault(const Scenario& sc, const std::string& ckpt,
                                       std::vector<std::string>* refused) {
  std::vector<absl::Status> st(sc.world);
  refused->assign(sc.world, "");
  std::mutex mu;
  const int64_t before = io::IoFaultsInjected();
  RunThreads(sc.world, [&](int rank, Communicator* comm) {
    MlpSpec spec;
    spec.steps = 8;
    spec.ckpt_dir = ckpt;
    spec.save_after = 2;
    spec.hook = [&, rank](Engine* e, int step, int index) -> absl::Status {
      if (index != -1 || step != sc.at_step) return absl::OkStatus();
      if (rank == 0) {
        absl::Status a = io::SetIoFaults(sc.fault);
        if (!a.ok()) return a;
      }
      if (sc.phase == "save") {
        // Rank 0 armed before its save began; the others' writes come after
        // the save's first agreement, which waits for rank 0.
        absl::Status s = e->Save(ckpt, "late");
        return s;
      }
      return absl::OkStatus();
    };
    spec.after_failure = [&, rank](Engine* e, const absl::Status&) {
      auto step = e->Step();
      auto buf = e->GradBuffer(1);
      std::lock_guard<std::mutex> l(mu);
      (*refused)[rank] = step.ok() || buf.ok()
          ? std::string()
          : std::string(step.status().message()) + " | " + std::string(buf.status().message());
    };
    auto r = TrainMlp(sc.config, comm, spec);
    std::lock_guard<std::mutex> l(mu);
    st[rank] = r.ok() ? absl::OkStatus() : r.status();
  });
  (void)io::SetIoFaults("");
  EXPECT_GT(io::IoFaultsInjected(), before) << sc.name << ": the fault never fired";
  return st;
}

class IoFaultTest : public ::testing::TestWithParam<int> {};

std::vector<Scenario> Scenarios() {
  std::vector<Scenario> v;
  auto add = [&](Scenario s) { v.push_back(std::move(s)); };
  // NVMe optimizer state (stage 2 fp32, stage 3 bf16 with both offloads,
  // stage 1 fp16): a failed write or read in the optimizer step.
  {
    Scenario s;
    s.name = "optimizer_write_eio";
    s.config = Base(2, DType::kF32, "", true, false);
    s.fault = "write:2:EIO:zero_r1_";
    s.names = {"_optim_g", ".swp", "Input/output error", "load the last checkpoint",
               "/mid' (global step 2)"};
    add(s);
  }
  {
    Scenario s;
    s.name = "optimizer_write_enospc";
    s.config = Base(3, DType::kBF16, "", true, true);
    s.fault = "write:3:ENOSPC:_optim_";
    s.fault_rank = -1;  // whichever rank writes third
    s.code = absl::StatusCode::kResourceExhausted;
    s.names = {"_optim_g", "No space left on device", "load the last checkpoint", "/mid'"};
    add(s);
  }
  {
    Scenario s;
    s.name = "optimizer_read_eio";
    s.config = Base(1, DType::kF16, "", true, false);
    s.fault = "read:2:EIO:zero_r2_";
    s.fault_rank = 2;
    s.names = {"read from", "_optim_g", "load the last checkpoint"};
    add(s);
  }
  // Stage 3 params on NVMe: a gather's read (the peers are failed at once
  // through the communicator's abort), a step's write.
  {
    Scenario s;
    s.name = "param_gather_read_eio";
    s.config = Base(3, DType::kBF16, "", false, true);
    s.fault = "read:1:EIO:zero_r1_";
    s.names = {"_param_g", ".swp", "Input/output error"};
    add(s);
  }
  {
    Scenario s;
    s.name = "param_step_write_enospc";
    s.config = Base(3, DType::kF16, "", false, true);
    s.fault = "write:1:ENOSPC:zero_r0_";
    s.fault_rank = 0;
    s.code = absl::StatusCode::kResourceExhausted;
    s.names = {"_param_g", "No space left on device", "load the last checkpoint"};
    add(s);
  }
  // Both offloads (ZeRO-Infinity): the step's param-file writes run behind
  // the update on an IO thread (core/engine/update_io_pipeline.h); the
  // failure still names the file and ends the step on every rank.
  {
    Scenario s;
    s.name = "infinity_param_write_enospc";
    s.config = Base(3, DType::kBF16, "", true, true);
    s.fault = "write:1:ENOSPC:_param_g";
    s.fault_rank = -1;  // whichever rank writes its params first
    s.code = absl::StatusCode::kResourceExhausted;
    s.names = {"_param_g", "No space left on device", "load the last checkpoint"};
    add(s);
  }
  // Both offloads: the backward's gradient-file writes run behind the
  // reducer on an IO thread (ShardedState::AccumulateGradF32); the failure
  // comes back before the step reads them, names the file, and ends the
  // step on every rank.
  {
    Scenario s;
    s.name = "infinity_grad_write_eio";
    s.config = Base(3, DType::kBF16, "", true, true);
    s.fault = "write:1:EIO:_grad_g";
    s.fault_rank = -1;  // whichever rank writes its gradients first
    s.names = {"_grad_g", ".swp", "Input/output error"};
    add(s);
  }
  // Short transfers everywhere: completed, training unchanged.
  {
    Scenario s;
    s.name = "short_reads_and_writes";
    s.config = Base(3, DType::kBF16, "", true, true);
    s.fault = "read:1+:short;write:1+:short";
    s.recovers = true;
    add(s);
  }
  // Checkpoint save: a rank file's write, fsync, rename; the manifest's
  // write on rank 0 (ENOSPC); the publishing rename of the tag.
  {
    Scenario s;
    s.name = "save_write_eio";
    s.config = Base(2, DType::kF32, "", true, false);
    s.phase = "save";
    s.fault = "write:1:EIO:rank_00001";
    s.names = {"rank_00001.bin", "Input/output error"};
    add(s);
  }
  {
    Scenario s;
    s.name = "save_write_enospc";
    s.config = Base(3, DType::kBF16, "", false, false);
    s.phase = "save";
    s.fault = "write:2:ENOSPC:rank_00002";
    s.fault_rank = 2;
    s.code = absl::StatusCode::kResourceExhausted;
    s.names = {"rank_00002.bin", "No space left on device"};
    add(s);
  }
  {
    Scenario s;
    s.name = "save_fsync_eio";
    s.config = Base(1, DType::kF32, "", false, false);
    s.phase = "save";
    s.fault = "fsync:1:EIO:rank_00001";
    s.names = {"fsync", "rank_00001.bin"};
    add(s);
  }
  {
    Scenario s;
    s.name = "save_rename_eio";
    s.config = Base(2, DType::kF16, "", false, false);
    s.phase = "save";
    s.fault = "rename:1:EIO:rank_00001";
    s.names = {"rename", "rank_00001.bin"};
    add(s);
  }
  {
    Scenario s;
    s.name = "save_manifest_enospc";
    s.config = Base(2, DType::kF32, "", false, false);
    s.phase = "save";
    s.fault = "write:1:ENOSPC:manifest.json";
    s.fault_rank = 0;
    s.code = absl::StatusCode::kResourceExhausted;
    s.names = {"manifest.json", "No space left on device"};
    add(s);
  }
  {
    Scenario s;
    s.name = "save_publish_rename_eio";
    s.config = Base(2, DType::kF32, "", true, false);
    s.phase = "save";
    s.fault = "rename:1:EIO:/late";
    s.fault_rank = 0;
    s.names = {"rename", ".late.partial"};
    add(s);
  }
  // Checkpoint load: a read of a rank file (EIO), short reads (completed).
  {
    Scenario s;
    s.name = "load_read_eio";
    s.config = Base(3, DType::kBF16, "", true, true);
    s.phase = "load";
    s.fault = "read:2:EIO:rank_00001";  // (rank 2 of this model holds only padding)
    s.fault_rank = -1;  // the rank reading that file
    s.names = {"rank_00001.bin", "Input/output error"};
    add(s);
  }
  {
    Scenario s;
    s.name = "load_short_reads";
    s.config = Base(2, DType::kF32, "", true, false);
    s.phase = "load";
    s.fault = "read:1+:short:rank_0000";
    s.recovers = true;
    add(s);
  }
  return v;
}

TEST_P(IoFaultTest, ClearErrorOnEveryRankAndTheLastCheckpointResumesBitwise) {
  Scenario sc = Scenarios()[GetParam()];
  const std::string nvme = FreshDir(sc.name + "_nv");
  auto set_nvme = [&](Config c) {
    if (c.offload_optimizer.device == OffloadDevice::kNvme) c.offload_optimizer.nvme_path = nvme;
    if (c.offload_param.device == OffloadDevice::kNvme) c.offload_param.nvme_path = nvme;
    return c;
  };
  sc.config = set_nvme(sc.config);
  // The uninterrupted run, in memory (NVMe runs equal it bitwise).
  Config mem = sc.config;
  mem.offload_optimizer.device = OffloadDevice::kNone;
  mem.offload_param.device = OffloadDevice::kNone;
  MlpSpec full_spec;
  full_spec.steps = 8;
  const MlpResult full = TrainAt(mem, sc.world, full_spec);

  const std::string ckpt = FreshDir(sc.name + "_ck");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<absl::Status> st;
  std::vector<std::string> refused;
  if (sc.phase == "load") {
    // A clean run saves "mid"; the faulted one is the load.
    MlpSpec save;
    save.steps = 8;
    save.ckpt_dir = ckpt;
    save.save_after = 2;
    (void)TrainAt(sc.config, sc.world, save);
    ASSERT_TRUE(io::SetIoFaults(sc.fault).ok());
    const int64_t before = io::IoFaultsInjected();
    st.assign(sc.world, absl::OkStatus());
    std::mutex mu;
    std::vector<MlpResult> got(sc.world);
    RunThreads(sc.world, [&](int rank, Communicator* comm) {
      MlpSpec spec;
      spec.steps = 8;
      spec.resume_dir = ckpt;
      spec.resume_tag = "mid";
      auto r = TrainMlp(sc.config, comm, spec);
      std::lock_guard<std::mutex> l(mu);
      st[rank] = r.ok() ? absl::OkStatus() : r.status();
      if (r.ok()) got[rank] = *r;
    });
    ASSERT_TRUE(io::SetIoFaults("").ok());
    EXPECT_GT(io::IoFaultsInjected(), before) << "the fault never fired";
    if (sc.recovers) {
      for (int r = 0; r < sc.world; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r];
        ExpectSameParams(got[r], full, sc.name);
      }
    }
  } else {
    st = RunWithFault(sc, ckpt, &refused);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sc.recovers) {
    if (sc.phase != "load") {
      for (int r = 0; r < sc.world; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    }
    Report(sc, "completed, bitwise", secs);
    if (sc.phase == "load") return;
    // Bitwise: rerun (fault armed from the start) and compare params.
    ASSERT_TRUE(io::SetIoFaults(sc.fault).ok());
    const MlpResult shorted = TrainAt(sc.config, sc.world, full_spec);
    ASSERT_TRUE(io::SetIoFaults("").ok());
    ExpectSameParams(shorted, full, sc.name);
    EXPECT_TRUE(FilesIn(nvme).empty());
    return;
  }
  // Every rank failed, none by the timeout.
  int named = 0;
  std::vector<bool> named_rank(sc.world, false);
  for (int r = 0; r < sc.world; ++r) {
    ASSERT_FALSE(st[r].ok()) << sc.name << ": rank " << r << " went on";
    EXPECT_NE(st[r].code(), absl::StatusCode::kDeadlineExceeded) << st[r];
    bool all = true;
    for (const std::string& n : sc.names) {
      if (st[r].message().find(n) == std::string::npos) all = false;
    }
    if (all && st[r].code() == sc.code) {
      ++named;
      named_rank[r] = true;
    }
    std::printf("[%s] rank %d: %s\n", sc.name.c_str(), r, st[r].ToString().c_str());
    if (sc.phase == "step") {
      // The failed engine refuses further steps, repeating the cause.
      EXPECT_NE(refused[r].find("unusable"), std::string::npos)
          << sc.name << ": rank " << r << " took another call: '" << refused[r] << "'";
    }
  }
  EXPECT_GE(named, 1) << sc.name << ": no rank named the file and the cause";
  if (sc.fault_rank >= 0) {
    EXPECT_TRUE(named_rank[sc.fault_rank]) << sc.name;
  }
  EXPECT_LT(secs, 20.0) << "a rank waited for the timeout";
  // The last checkpoint and latest intact; no swap file left.
  EXPECT_EQ(Slurp(ckpt + "/latest"), "mid\n");
  EXPECT_FALSE(ckpt::Exists(ckpt + "/late"));
  EXPECT_TRUE(FilesIn(nvme).empty()) << FilesIn(nvme).size() << " files left";
  // A new engine (new communicators) loads it and ends where the
  // uninterrupted run ends.
  MlpSpec resume;
  resume.steps = 8;
  resume.resume_dir = ckpt;
  resume.resume_tag = "";
  const MlpResult resumed = TrainAt(sc.config, sc.world, resume);
  ExpectSameParams(resumed, full, sc.name);
  Report(sc, "failed on every rank, file named, resumed bitwise", secs);
}

INSTANTIATE_TEST_SUITE_P(Faults, IoFaultTest, ::testing::Range(0, static_cast<int>(Scenarios().size())),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return Scenarios()[i.param].name;
                         });

// Gradient accumulation with the gradients in files (stage 3,
// offload_optimizer "nvme", ZeRO-Infinity): each micro-step after the first
// reads the running sum back (ShardedState::AccumulateGradF32) before adding
// its own. The fault is aimed at that read by count
// (tests/testing/aiming_device.h): a first run counts, a second fails it.
struct AccumRun {
  std::vector<absl::Status> st;
  std::vector<std::string> refused;
  int64_t reads_to_accum = -1;    // the target's reads up to its first accumulation read
  int64_t accums_in_micro1 = 0;   // the target's AccumulateF32 calls in micro-step 2
  double seconds = 0;
  MlpResult result;  // the target's, when it trained through
};

// Trains 8 steps (checkpoint "mid" after step 2); at step 4 rank `target`
// arms `action` on its gradient files: "count" (an entry that never fires,
// to count), or "N:EIO" / "N+:short".
AccumRun RunAccum(const Config& c, int world, int target, const std::string& nvme,
                  const std::string& ckpt, const std::string& action, int hidden = 25) {
  constexpr int kStep = 4;
  AccumRun out;
  out.st.assign(world, absl::OkStatus());
  out.refused.assign(world, "");
  std::mutex mu;
  std::atomic<bool> micro1{false};
  std::atomic<int> seen4{0};
  const auto t0 = std::chrono::steady_clock::now();
  RunThreads(world, [&](int rank, Communicator* comm) {
    MlpSpec spec;
    spec.hidden = hidden;
    spec.steps = 8;
    spec.ckpt_dir = ckpt;
    spec.save_after = 2;
    if (rank == target) {
      spec.make_device = [&]() -> std::unique_ptr<Device> {
        return std::make_unique<AimingDevice>([&] {
          if (!micro1.load()) return;
          if (out.accums_in_micro1++ == 0) out.reads_to_accum = io::IoFaultMatches();
        });
      };
    }
    spec.hook = [&, rank](Engine*, int step, int index) -> absl::Status {
      if (rank != target || step != kStep) return absl::OkStatus();
      if (index == 4 && ++seen4 == 2) micro1 = true;  // micro-step 2's first GradReady
      if (index != -1) return absl::OkStatus();
      const std::string files = GradFilePrefix(nvme, rank);
      if (files.empty()) return absl::InternalError("no gradient file of the target rank");
      const std::string spec_n = action == "count" ? "1000000000:EIO" : action;
      return io::SetIoFaults("read:" + spec_n + ":" + files);
    };
    spec.after_failure = [&, rank](Engine* e, const absl::Status&) {
      auto step = e->Step();
      auto buf = e->GradBuffer(1);
      std::lock_guard<std::mutex> l(mu);
      out.refused[rank] = step.ok() || buf.ok() ? std::string()
                                                : std::string(step.status().message());
    };
    auto r = TrainMlp(c, comm, spec);
    std::lock_guard<std::mutex> l(mu);
    out.st[rank] = r.ok() ? absl::OkStatus() : r.status();
    if (r.ok() && rank == target) out.result = *r;
  });
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (void)io::SetIoFaults("");
  return out;
}

class GradAccumReadFault : public ::testing::TestWithParam<int> {};

TEST_P(GradAccumReadFault, EioEndsTheStepOnEveryRankNamingTheFileAndResumesBitwise) {
  const int world = GetParam();
  const int target = world == 1 ? 0 : 1;  // (rank 2 of this model owns only padding)
  const std::string name = "accum_w" + std::to_string(world);
  const std::string nvme = FreshDir(name + "_nv");
  // World 1: optimizer offload only, fp32; world 3: both offloads, bf16.
  Config c = world == 1 ? Base(3, DType::kF32, nvme, true, false)
                        : Base(3, DType::kBF16, nvme, true, true);
  c.gradient_accumulation_steps = 2;
  Config mem = c;
  mem.offload_optimizer.device = OffloadDevice::kNone;
  mem.offload_param.device = OffloadDevice::kNone;
  MlpSpec full_spec;
  full_spec.steps = 8;
  const MlpResult full = TrainAt(mem, world, full_spec);

  // Count: the run trains through, to the in-memory bits.
  const AccumRun count = RunAccum(c, world, target, nvme, FreshDir(name + "_ck0"), "count");
  for (int r = 0; r < world; ++r) ASSERT_TRUE(count.st[r].ok()) << count.st[r];
  ASSERT_GE(count.reads_to_accum, 1) << "no accumulation read in micro-step 2";
  ASSERT_TRUE(FilesIn(nvme).empty());

  const std::string ckpt = FreshDir(name + "_ck");
  const int64_t before = io::IoFaultsInjected();
  const AccumRun hit = RunAccum(c, world, target, nvme, ckpt,
                                std::to_string(count.reads_to_accum) + ":EIO");
  EXPECT_EQ(io::IoFaultsInjected(), before + 1) << "the fault did not fire once";
  // The failed read was the accumulation read: the target added nothing in
  // micro-step 2 (no zeros added in place of the stored sum).
  EXPECT_EQ(hit.accums_in_micro1, 0);
  for (int r = 0; r < world; ++r) {
    std::printf("[%s] rank %d: %s\n", name.c_str(), r, hit.st[r].ToString().c_str());
    ASSERT_FALSE(hit.st[r].ok()) << "rank " << r << " went on";
    EXPECT_NE(hit.st[r].code(), absl::StatusCode::kDeadlineExceeded) << hit.st[r];
    const std::string m(hit.st[r].message());
    // Every rank names the file and the cause (the peers through the abort).
    EXPECT_NE(m.find("read from '" + nvme + "/zero_r" + std::to_string(target)),
              std::string::npos) << m;
    EXPECT_NE(m.find("_grad_g"), std::string::npos) << m;
    EXPECT_NE(m.find("Input/output error"), std::string::npos) << m;
    EXPECT_NE(hit.refused[r].find("unusable"), std::string::npos)
        << "rank " << r << " took another call: '" << hit.refused[r] << "'";
  }
  EXPECT_EQ(hit.st[target].code(), absl::StatusCode::kUnavailable) << hit.st[target];
  EXPECT_LT(hit.seconds, 20.0) << "a rank waited for the timeout";
  EXPECT_EQ(Slurp(ckpt + "/latest"), "mid\n");
  EXPECT_TRUE(FilesIn(nvme).empty()) << FilesIn(nvme).size() << " files left";
  MlpSpec resume;
  resume.steps = 8;
  resume.resume_dir = ckpt;
  const MlpResult resumed = TrainAt(c, world, resume);
  ExpectSameParams(resumed, full, name);
  std::printf("{\"bench\": \"io_fault\", \"scenario\": \"grad_accum_read_eio\", \"world\": %d, "
              "\"read\": %lld, \"outcome\": \"failed on every rank, file named, resumed "
              "bitwise\", \"seconds\": %.2f}\n",
              world, static_cast<long long>(count.reads_to_accum), hit.seconds);
}

// Short reads from the first accumulation read on (half the bytes, whole
// 4 KiB blocks under O_DIRECT: only transfers of 8 KiB or more, so a wider
// model in one sub-group and larger buckets) are completed: training ends
// on the in-memory bits.
TEST(GradAccumReadFault, ShortReadIsCompletedBitwise) {
  const std::string nvme = FreshDir("accum_short_nv");
  Config c = Base(3, DType::kF32, nvme, true, false);
  c.gradient_accumulation_steps = 2;
  c.sub_group_size = 1 << 20;
  c.reduce_bucket_size = 5000;
  constexpr int kHidden = 1000;  // fc2.weight: 3000 fp32, 12 KB
  Config mem = c;
  mem.offload_optimizer.device = OffloadDevice::kNone;
  MlpSpec full_spec;
  full_spec.hidden = kHidden;
  full_spec.steps = 8;
  const MlpResult full = TrainAt(mem, 1, full_spec);
  const AccumRun count =
      RunAccum(c, 1, 0, nvme, FreshDir("accum_short_ck0"), "count", kHidden);
  ASSERT_TRUE(count.st[0].ok()) << count.st[0];
  ASSERT_GE(count.reads_to_accum, 1);
  const int64_t before = io::IoFaultsInjected();
  const AccumRun shorted = RunAccum(c, 1, 0, nvme, FreshDir("accum_short_ck"),
                                    std::to_string(count.reads_to_accum) + "+:short", kHidden);
  ASSERT_TRUE(shorted.st[0].ok()) << shorted.st[0];
  EXPECT_GT(io::IoFaultsInjected(), before) << "no read was made short";
  EXPECT_GT(shorted.accums_in_micro1, 0);
  EXPECT_TRUE(FilesIn(nvme).empty());
  ExpectSameParams(count.result, full, "accum_short (no fault)");
  ExpectSameParams(shorted.result, full, "accum_short");
  std::printf("{\"bench\": \"io_fault\", \"scenario\": \"grad_accum_short_read\", \"world\": 1, "
              "\"read\": %lld, \"outcome\": \"completed, bitwise\", \"seconds\": %.2f}\n",
              static_cast<long long>(count.reads_to_accum), shorted.seconds);
}

INSTANTIATE_TEST_SUITE_P(Worlds, GradAccumReadFault, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "world" + std::to_string(i.param);
                         });

// A crash (SIGKILL) before each write, fsync and rename of a save, in a
// child process (tests/ckpt_crash_helper): `latest` always names a tag that
// verifies and loads; the tags are A or B, never a partial one. "async":
// B is saved asynchronously with keep_last 1, so the crashes hit the
// background thread's write, publish and the deletion of A.
class IoFaultCrash : public ::testing::TestWithParam<std::string> {};

TEST_P(IoFaultCrash, CrashBeforeAnyStepOfTheSaveProtocolKeepsAWholeTag) {
  const std::string mode = GetParam() == "async" ? "--async-fault-b" : "--fault-b";
  int crashes = 0;
  for (const char* op : {"write", "fsync", "rename"}) {
    for (int n = 1; n < 64; ++n) {
      const std::string dir = FreshDir(std::string("crash_") + op);
      const std::string fault = std::string(op) + ":" + std::to_string(n) + ":crash";
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::execl("tests/ckpt_crash_helper", "ckpt_crash_helper", dir.c_str(), mode.c_str(),
                fault.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
      }
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      if (WIFEXITED(status)) {
        ASSERT_EQ(WEXITSTATUS(status), 0) << fault;  // no such call: B saved
        EXPECT_EQ(Slurp(dir + "/latest"), "B\n");
        break;
      }
      ASSERT_TRUE(WIFSIGNALED(status)) << fault;
      ++crashes;
      const std::string latest = Slurp(dir + "/latest");
      EXPECT_TRUE(latest == "A\n" || latest == "B\n") << fault << ": latest '" << latest << "'";
      auto ck = ckpt::Checkpoint::Open(dir, "");
      ASSERT_TRUE(ck.ok()) << fault << ": " << ck.status();
      EXPECT_TRUE((*ck)->Verify(nullptr).ok()) << fault;
      MlpSpec spec;
      RunThreads(2, [&](int, Communicator* comm) {
        Config c = SmallMlpConfig(1, DType::kF32);
        auto e = MakeMlpEngine(c, comm, spec);
        ASSERT_TRUE(e.ok());
        EXPECT_TRUE((*e)->Load(dir, "").ok()) << fault;
      });
    }
  }
  std::printf("{\"bench\": \"io_fault\", \"scenario\": \"crash_in_%s_save\", \"crashes\": %d, "
              "\"outcome\": \"latest whole and loadable after each\"}\n", GetParam().c_str(),
              crashes);
  EXPECT_GE(crashes, 8);
}

INSTANTIATE_TEST_SUITE_P(SyncAsync, IoFaultCrash, ::testing::Values("sync", "async"));

TEST(IoFaultSpec, MalformedSpecsAreRefusedNamingTheEntry) {
  for (const char* bad : {"write", "write:0:EIO", "sync:1:EIO", "write:1:EWHAT", "read:x:EIO"}) {
    absl::Status s = io::SetIoFaults(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(bad), std::string::npos) << s;
  }
  EXPECT_TRUE(io::SetIoFaults("").ok());
}

}  // namespace
}  // namespace testing
}  // namespace zero
