// Asynchronous checkpoints (docs/ARCHITECTURE.md, "Asynchronous
// checkpoints") on thread ranks: a save that returns after the snapshot
// writes the same checkpoint, bit for bit, as a synchronous save at the same
// step while training goes on; a run resumed from it equals the
// uninterrupted run; keep_last deletes only older tags after the new one is
// published; a failed background write is returned by the next call on
// every rank and leaves `latest` at the previous tag. (The crash at each
// point of the background write: io_fault_test.)
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/file_util.h"
#include "core/common/io_fault.h"
#include "core/common/status_macros.h"
#include "gtest/gtest.h"
#include "tests/testing/expect_same.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/off_host_device.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

std::string TmpDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string d = ckpt::JoinPath(t ? t : "/tmp", name);
  EXPECT_TRUE(ckpt::RemoveTree(d).ok());
  return d;
}

std::string Latest(const std::string& dir) {
  auto s = ckpt::ReadFile(ckpt::JoinPath(dir, "latest"));
  return s.ok() ? *s : "";
}

void ExpectSameParams(const MlpResult& a, const MlpResult& b, const std::string& what) {
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t p = 0; p < a.params.size(); ++p) {
    EXPECT_TRUE(a.params[p] == b.params[p]) << what << ": param " << a.names[p] << " differs";
  }
}

void ExpectSameCheckpoint(const std::string& a, const std::string& b, const std::string& tag) {
  const auto sa = CheckpointStates(a, tag), sb = CheckpointStates(b, tag);
  ASSERT_EQ(sa.size(), sb.size());
  ASSERT_FALSE(sa.empty());
  for (const auto& [k, v] : sa) {
    ASSERT_TRUE(sb.count(k)) << k;
    EXPECT_EQ(std::memcmp(v.data(), sb.at(k).data(), v.size() * 4), 0) << tag << ": " << k;
  }
  auto ma = ckpt::Checkpoint::Open(a, tag), mb = ckpt::Checkpoint::Open(b, tag);
  ASSERT_TRUE(ma.ok() && mb.ok());
  EXPECT_EQ((*ma)->manifest().global_step, (*mb)->manifest().global_step);
  EXPECT_EQ((*ma)->manifest().skipped_steps, (*mb)->manifest().skipped_steps);
  EXPECT_EQ((*ma)->manifest().scaler.cur_scale, (*mb)->manifest().scaler.cur_scale);
  EXPECT_EQ((*ma)->manifest().scaler.cur_iter, (*mb)->manifest().scaler.cur_iter);
}

class AsyncSaveTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// Runs A (async save after step 5) and B (the same save synchronously):
// the two `mid` checkpoints hold the same bits, training is not changed by
// the background write, and a run resumed from A's `mid` ends where the
// uninterrupted run does, bit for bit.
TEST_P(AsyncSaveTest, SameCheckpointAsSynchronousAndResumesBitwise) {
  const int stage = std::get<0>(GetParam());
  const DType dtype = static_cast<DType>(std::get<1>(GetParam()));
  const int world = std::get<2>(GetParam());
  Config c = SmallMlpConfig(stage, dtype);
  MlpSpec async_run;
  async_run.ckpt_dir = TmpDir("async_a");
  async_run.save_after = 5;
  async_run.save_options.async = true;
  async_run.final_tag = "final";
  if (dtype == DType::kF16) {
    async_run.inf_step = 2;  // a scaler state other than the initial one
    c.hysteresis = 1;
  }
  MlpSpec sync_run = async_run;
  sync_run.ckpt_dir = TmpDir("async_b");
  sync_run.save_options.async = false;
  MlpResult a = TrainAt(c, world, async_run);
  MlpResult b = TrainAt(c, world, sync_run);
  ExpectSameBits(a, b, "async vs synchronous save");
  ExpectSameCheckpoint(async_run.ckpt_dir, sync_run.ckpt_dir, "mid");
  ExpectSameCheckpoint(async_run.ckpt_dir, sync_run.ckpt_dir, "final");
  EXPECT_EQ(Latest(async_run.ckpt_dir), "final\n");

  MlpSpec resumed;
  resumed.ckpt_dir = TmpDir("async_resumed");
  resumed.final_tag = "final";
  resumed.resume_dir = async_run.ckpt_dir;
  resumed.resume_tag = "mid";
  MlpResult r = TrainAt(c, world, resumed);
  ExpectSameParams(r, a, "resumed from the async save");
}

INSTANTIATE_TEST_SUITE_P(
    StagesDtypesWorlds, AsyncSaveTest,
    ::testing::Values(std::make_tuple(0, 0, 2), std::make_tuple(1, 1, 3),
                      std::make_tuple(2, 0, 3), std::make_tuple(3, 0, 2),
                      std::make_tuple(3, 1, 3), std::make_tuple(3, 2, 3)),
    [](const ::testing::TestParamInfo<AsyncSaveTest::ParamType>& i) {
      return "stage" + std::to_string(std::get<0>(i.param)) + "_" +
             DTypeName(static_cast<DType>(std::get<1>(i.param))) + "_world" +
             std::to_string(std::get<2>(i.param));
    });

// Where the state lives other than plain host memory: on a stand-in for a
// GPU (the snapshot downloads it, into the device's host buffer), beside it
// in host memory (ZeRO-Offload), and in NVMe files (read through the tier).
// The async checkpoint equals the synchronous one bit for bit and training
// is unchanged.
TEST(AsyncSave, SameCheckpointWithStateOnADeviceOffloadedOrOnNvme) {
  for (const std::string where : {"device", "offload_cpu", "nvme"}) {
    SCOPED_TRACE(where);
    Config c = SmallMlpConfig(3, where == "nvme" ? DType::kF32 : DType::kBF16);
    MlpSpec async_run;
    async_run.ckpt_dir = TmpDir("where_a");
    async_run.save_after = 4;
    async_run.save_options.async = true;
    if (where != "nvme") {
      async_run.make_device = [] { return std::make_unique<OffHostDevice>(); };
    }
    if (where == "offload_cpu") c.offload_optimizer.device = OffloadDevice::kCpu;
    if (where == "nvme") {
      c.offload_optimizer.device = OffloadDevice::kNvme;
      c.offload_optimizer.nvme_path = TmpDir("where_nvme");
      ASSERT_TRUE(ckpt::MakeDirs(c.offload_optimizer.nvme_path).ok());
    }
    MlpSpec sync_run = async_run;
    sync_run.ckpt_dir = TmpDir("where_b");
    sync_run.save_options.async = false;
    MlpResult a = TrainAt(c, 3, async_run);
    MlpResult b = TrainAt(c, 3, sync_run);
    ExpectSameBits(a, b, "async vs synchronous save, state on " + where);
    ExpectSameCheckpoint(async_run.ckpt_dir, sync_run.ckpt_dir, "mid");
  }
}

// Saves every step with keep_last 2: after each save exactly the two newest
// tags remain, `latest` names the newest, and it loads.
TEST(AsyncSave, KeepLastDeletesOnlyOlderTagsAfterPublishing) {
  const std::string dir = TmpDir("keep_last");
  const int world = 3;
  MlpSpec spec;
  spec.steps = 6;
  RunThreads(world, [&](int rank, Communicator* comm) {
    Config c = SmallMlpConfig(3, DType::kF32);
    MlpSpec s = spec;
    s.hook = [&](Engine* e, int step, int index) -> absl::Status {
      if (index != -1 || step == 0) return absl::OkStatus();
      ckpt::SaveOptions o;
      o.async = step % 2 == 1;  // both kinds honour keep_last
      o.keep_last = 2;
      absl::Status st = e->Save(dir, "s" + std::to_string(step), o);
      if (!st.ok()) return st;
      RETURN_IF_ERROR(e->WaitForCheckpoint());
      if (rank == 0) {
        for (int t = 1; t <= step; ++t) {
          const bool kept = t >= step - 1;
          EXPECT_EQ(ckpt::Exists(dir + "/s" + std::to_string(t)), kept)
              << "after saving s" << step << ": s" << t;
        }
        EXPECT_EQ(Latest(dir), "s" + std::to_string(step) + "\n");
      }
      return absl::OkStatus();
    };
    auto r = TrainMlp(c, comm, s);
    EXPECT_TRUE(r.ok()) << "rank " << rank << ": " << r.status();
  });
  RunThreads(2, [&](int, Communicator* comm) {
    Config c = SmallMlpConfig(2, DType::kF32);
    auto e = MakeMlpEngine(c, comm, spec);
    ASSERT_TRUE(e.ok());
    EXPECT_TRUE((*e)->Load(dir, "").ok());
  });
}

// Rank 1's rank file of tag `bad` fails to write (ENOSPC) in the
// background. The save call itself succeeded; training goes on; the next
// call (a save, a load, or a wait) returns the failure on every rank, naming
// the save and the file, and does nothing else; `latest` stays at `good`;
// the call after that works.
TEST(AsyncSave, BackgroundFailureIsReportedAtTheNextCallOnEveryRank) {
  for (const std::string next : {"save", "load", "wait"}) {
    SCOPED_TRACE(next);
    const std::string dir = TmpDir("bg_fail_" + next);
    const int world = 3;
    std::vector<absl::Status> reported(world), after(world);
    MlpSpec spec;
    spec.steps = 6;
    RunThreads(world, [&](int rank, Communicator* comm) {
      Config c = SmallMlpConfig(2, DType::kF32);
      MlpSpec s = spec;
      s.hook = [&](Engine* e, int step, int index) -> absl::Status {
        if (index != -1) return absl::OkStatus();
        ckpt::SaveOptions o;
        o.async = true;
        if (step == 1) return e->Save(dir, "good", o);
        if (step == 2) {
          RETURN_IF_ERROR(e->WaitForCheckpoint());
          RETURN_IF_ERROR(comm->Barrier());
          if (rank == 0) {
            EXPECT_TRUE(io::SetIoFaults("write:1+:ENOSPC:bad.partial/rank_00001").ok());
          }
          RETURN_IF_ERROR(comm->Barrier());
          return e->Save(dir, "bad", o);  // the snapshot only: it succeeds
        }
        if (step == 4) {
          if (next == "save") reported[rank] = e->Save(dir, "later", o);
          if (next == "load") reported[rank] = e->Load(dir, "good");
          if (next == "wait") reported[rank] = e->WaitForCheckpoint();
          RETURN_IF_ERROR(comm->Barrier());
          if (rank == 0) {
            EXPECT_TRUE(io::SetIoFaults("").ok());
          }
          RETURN_IF_ERROR(comm->Barrier());
          after[rank] = e->Save(dir, "again", o);
          if (after[rank].ok()) after[rank] = e->WaitForCheckpoint();
        }
        return absl::OkStatus();
      };
      auto r = TrainMlp(c, comm, s);
      EXPECT_TRUE(r.ok()) << "rank " << rank << ": " << r.status();
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(reported[r].code(), absl::StatusCode::kResourceExhausted)
          << "rank " << r << ": " << reported[r];
      const std::string m(reported[r].message());
      EXPECT_NE(m.find("background save of '" + dir + "/bad'"), std::string::npos) << m;
      EXPECT_NE(m.find("rank_00001.bin"), std::string::npos) << m;
      EXPECT_TRUE(after[r].ok()) << "rank " << r << ": " << after[r];
    }
    EXPECT_FALSE(ckpt::Exists(dir + "/bad"));
    if (next == "save") {
      EXPECT_FALSE(ckpt::Exists(dir + "/later"));  // not attempted
    }
    EXPECT_EQ(Latest(dir), "again\n");
  }
}

TEST(AsyncSave, DestroyWaitsForTheBackgroundWrite) {
  const std::string dir = TmpDir("destroy_waits");
  MlpSpec spec;
  spec.steps = 2;
  RunThreads(2, [&](int, Communicator* comm) {
    Config c = SmallMlpConfig(3, DType::kF32);
    auto e = MakeMlpEngine(c, comm, spec);
    ASSERT_TRUE(e.ok());
    ckpt::SaveOptions o;
    o.async = true;
    ASSERT_TRUE((*e)->Save(dir, "t", o).ok());
    e->reset();  // no wait: destroy waits
  });
  EXPECT_EQ(Latest(dir), "t\n");
  auto ck = ckpt::Checkpoint::Open(dir, "");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_TRUE((*ck)->Verify(nullptr).ok());
}

TEST(AsyncSave, RefusedUpFrontNotInTheBackground) {
  MlpSpec spec;
  spec.steps = 1;
  RunThreads(2, [&](int, Communicator* comm) {
    Config c = SmallMlpConfig(2, DType::kF32);
    auto e = MakeMlpEngine(c, comm, spec);
    ASSERT_TRUE(e.ok());
    ckpt::SaveOptions o;
    o.async = true;
    absl::Status s = (*e)->Save(TmpDir("refused"), "latest", o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE((*e)->WaitForCheckpoint().ok());
  });
}

}  // namespace
}  // namespace testing
}  // namespace zero
