// Checkpoints (docs/ARCHITECTURE.md, "Checkpoints"): a resumed run ends bitwise where the
// uninterrupted one ends; a checkpoint loads at another world size and stage;
// an interrupted save leaves the previous tag whole; corruption is refused
// with the file and section named.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/file_util.h"
#include "core/ckpt/reshard.h"
#include "tests/testing/expect_same.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

using ckpt::Checkpoint;

Config BaseConfig(int stage, DType dtype) { return SmallMlpConfig(stage, dtype); }

std::string TmpDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string d = ckpt::JoinPath(t ? t : "/tmp", name);
  EXPECT_TRUE(ckpt::RemoveTree(d).ok());
  return d;
}

// Every rank's status from running `spec` (expected to fail).
std::vector<absl::Status> TrainStatuses(const Config& c, int world, const MlpSpec& spec) {
  std::vector<absl::Status> out(world);
  RunThreads(world, [&](int rank, Communicator* comm) {
    out[rank] = TrainMlp(c, comm, spec).status();
  });
  return out;
}

void ExpectBitwiseEqual(const MlpResult& a, const MlpResult& b) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_EQ(a.params[i].size(), b.params[i].size());
    EXPECT_EQ(std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * 4), 0)
        << a.names[i];
  }
}

void ExpectStatesBitwiseEqual(const std::map<std::string, std::vector<float>>& a,
                              const std::map<std::string, std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    ASSERT_TRUE(it != b.end()) << k;
    ASSERT_EQ(v.size(), it->second.size()) << k;
    EXPECT_EQ(std::memcmp(v.data(), it->second.data(), v.size() * 4), 0) << k;
  }
}

// ---- Resume ------------------------------------------------------------------

class ResumeTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ResumeTest, ResumedRunIsBitwiseEqualToUninterrupted) {
  const int stage = std::get<0>(GetParam());
  const DType dtype = static_cast<DType>(std::get<1>(GetParam()));
  Config c = BaseConfig(stage, dtype);
  const int world = 3;
  MlpSpec full;
  full.ckpt_dir = TmpDir("resume_full");
  full.save_after = 5;
  full.final_tag = "final";
  if (dtype == DType::kF16) {
    full.inf_step = 2;  // the scaler state at step 5 is not the initial one
    c.hysteresis = 1;   // so the skip lowers the scale
  }
  MlpResult a = TrainAt(c, world, full);

  MlpSpec resumed;
  resumed.ckpt_dir = TmpDir("resume_resumed");
  resumed.final_tag = "final";
  resumed.resume_dir = full.ckpt_dir;
  resumed.resume_tag = "mid";
  MlpResult b = TrainAt(c, world, resumed);

  ExpectBitwiseEqual(b, a);
  ExpectStatesBitwiseEqual(CheckpointStates(resumed.ckpt_dir, "final"),
                           CheckpointStates(full.ckpt_dir, "final"));
  auto ma = Checkpoint::Open(full.ckpt_dir, "final");
  auto mb = Checkpoint::Open(resumed.ckpt_dir, "final");
  ASSERT_TRUE(ma.ok() && mb.ok());
  EXPECT_EQ((*mb)->manifest().global_step, (*ma)->manifest().global_step);
  EXPECT_EQ((*mb)->manifest().skipped_steps, (*ma)->manifest().skipped_steps);
  EXPECT_EQ((*mb)->manifest().scaler.cur_scale, (*ma)->manifest().scaler.cur_scale);
  EXPECT_EQ((*mb)->manifest().scaler.cur_iter, (*ma)->manifest().scaler.cur_iter);
  EXPECT_EQ((*mb)->manifest().scaler.last_overflow_iter, (*ma)->manifest().scaler.last_overflow_iter);
  if (dtype == DType::kF16) {
    EXPECT_EQ((*ma)->manifest().skipped_steps, 1);
    EXPECT_EQ(a.steps.back().loss_scale, b.steps.back().loss_scale);
    EXPECT_LT(a.steps.back().loss_scale, 256.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    StagesFp32Fp16, ResumeTest,
    ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(0, 1)),
    [](const ::testing::TestParamInfo<ResumeTest::ParamType>& i) {
      return "stage" + std::to_string(std::get<0>(i.param)) + "_" +
             DTypeName(static_cast<DType>(std::get<1>(i.param)));
    });

TEST(CkptTest, SgdMomentumResumesBitwise) {
  Config c = BaseConfig(2, DType::kF32);
  c.optimizer = OptimizerType::kSgd;
  c.momentum = 0.9;
  MlpSpec full;
  full.ckpt_dir = TmpDir("sgd_full");
  full.save_after = 4;
  full.final_tag = "final";
  MlpResult a = TrainAt(c, 2, full);
  MlpSpec resumed;
  resumed.ckpt_dir = TmpDir("sgd_resumed");
  resumed.final_tag = "final";
  resumed.resume_dir = full.ckpt_dir;
  MlpResult b = TrainAt(c, 2, resumed);  // tag empty: latest
  ExpectBitwiseEqual(b, a);
  auto sa = CheckpointStates(full.ckpt_dir, "final");
  EXPECT_EQ(sa.count("fc1.weight/momentum"), 1u);
  ExpectStatesBitwiseEqual(CheckpointStates(resumed.ckpt_dir, "final"), sa);
}

// ---- Reshard -------------------------------------------------------------------

TEST(CkptTest, LoadsAtAnotherWorldSizeAndStage) {
  Config c4 = BaseConfig(3, DType::kF32);
  MlpSpec full;
  full.ckpt_dir = TmpDir("reshard_full");
  full.save_after = 5;
  MlpResult a = TrainAt(c4, 4, full);
  for (auto [world, stage] : {std::pair<int, int>{2, 1}, {3, 2}, {1, 0}, {3, 3}}) {
    MlpSpec resumed;
    resumed.ckpt_dir = TmpDir("reshard_resumed");
    resumed.resume_dir = full.ckpt_dir;
    resumed.resume_tag = "mid";
    resumed.save_after = 5;  // right after the load: a resharded copy
    resumed.save_tag = "reloaded";
    MlpResult b = TrainAt(BaseConfig(stage, DType::kF32), world, resumed);
    EXPECT_LE(MaxRelDiff(b, a), 1e-6) << "world " << world << " stage " << stage;
    // Load then save moves every value unchanged into the new layout.
    ExpectStatesBitwiseEqual(CheckpointStates(resumed.ckpt_dir, "reloaded"),
                             CheckpointStates(full.ckpt_dir, "mid"));
    auto m = Checkpoint::Open(resumed.ckpt_dir, "reloaded");
    ASSERT_TRUE(m.ok());
    EXPECT_EQ((*m)->manifest().world_size, world);
    EXPECT_EQ((*m)->manifest().stage, stage);
    EXPECT_EQ((*m)->manifest().global_step, 5);
  }
}

TEST(CkptTest, OfflineReshardThenLoad) {
  Config c = BaseConfig(2, DType::kF32);
  MlpSpec full;
  full.ckpt_dir = TmpDir("offline_full");
  full.save_after = 5;
  MlpResult a = TrainAt(c, 4, full);
  const std::string out = TmpDir("offline_out");
  ASSERT_TRUE(ckpt::ReshardCheckpoint(full.ckpt_dir, "mid", out, 3).ok());
  auto ck = Checkpoint::Open(out, "");  // `latest` written too
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ((*ck)->manifest().world_size, 3);
  EXPECT_TRUE((*ck)->Verify(nullptr).ok());
  ExpectStatesBitwiseEqual(CheckpointStates(out, "mid"), CheckpointStates(full.ckpt_dir, "mid"));
  MlpSpec resumed;
  resumed.resume_dir = out;
  MlpResult b = TrainAt(BaseConfig(1, DType::kF32), 3, resumed);
  EXPECT_LE(MaxRelDiff(b, a), 1e-6);
}

TEST(CkptTest, WithoutOptimizerStatesMomentsStartAtZero) {
  Config c = BaseConfig(2, DType::kF32);
  MlpSpec full;
  full.ckpt_dir = TmpDir("nostates_full");
  full.save_after = 5;
  TrainAt(c, 2, full);
  MlpSpec resumed;
  resumed.ckpt_dir = TmpDir("nostates_resumed");
  resumed.resume_dir = full.ckpt_dir;
  resumed.save_after = 5;
  resumed.save_tag = "reloaded";
  resumed.steps = 6;
  resumed.load_options.load_optimizer_states = false;
  TrainAt(c, 2, resumed);
  auto saved = CheckpointStates(full.ckpt_dir, "mid");
  auto got = CheckpointStates(resumed.ckpt_dir, "reloaded");
  EXPECT_EQ(got["fc1.weight/master"], saved["fc1.weight/master"]);
  EXPECT_EQ(got["fc1.weight/exp_avg"], std::vector<float>(200, 0.0f));
  EXPECT_EQ(got["fc2.bias/exp_avg_sq"], std::vector<float>(3, 0.0f));
}

// ---- Preconditions and mismatches ---------------------------------------------

TEST(CkptTest, SaveMidAccumulationIsRefused) {
  Config c = BaseConfig(1, DType::kF32);
  c.gradient_accumulation_steps = 2;
  MlpSpec spec;
  RunThreads(2, [&](int, Communicator* comm) {
    auto e = MakeMlpEngine(c, comm, spec);
    ASSERT_TRUE(e.ok());
    auto g = (*e)->GradBuffer(1);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE((*e)->GradReady(1).ok());
    ASSERT_TRUE((*e)->Step().ok());  // micro-step 1 of 2
    absl::Status s = (*e)->Save(TmpDir("midacc"), "x");
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("micro-step 1 of 2"), std::string::npos) << s;
  });
}

// Engines with params a [10], b [6], c [4] as `names` lists them.
std::unique_ptr<Engine> SmallEngine(Communicator* comm, const std::vector<std::string>& names,
                                    const std::vector<std::vector<int64_t>>& shapes) {
  Config c = BaseConfig(2, DType::kF32);
  auto e = Engine::Create(c, comm);
  EXPECT_TRUE(e.ok());
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<float> init(100, 0.5f + i);
    ParamSpec p;
    p.name = names[i];
    p.shape = shapes[i];
    p.init = init.data();
    EXPECT_TRUE((*e)->RegisterParam(p).ok());
  }
  EXPECT_TRUE((*e)->Finalize().ok());
  return std::move(*e);
}

TEST(CkptTest, MissingExtraAndReshapedParamsAreNamed) {
  const std::string dir = TmpDir("names");
  RunThreads(2, [&](int rank, Communicator* comm) {
    auto e = SmallEngine(comm, {"a", "b"}, {{10}, {6}});
    ASSERT_TRUE(e->Save(dir, "t").ok());
    // Missing 'c', extra 'b'.
    auto f = SmallEngine(comm, {"a", "c"}, {{10}, {4}});
    absl::Status s = f->Load(dir, "t");
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("missing from the checkpoint (allow_missing to skip): 'c'"), std::string::npos) << s;
    EXPECT_NE(s.message().find("not in the engine: 'b'"), std::string::npos) << s;
    // Nothing was written: the engine is still usable.
    EXPECT_TRUE(f->Save(dir, "after_failed_load").ok());
    // Reshaped.
    auto g = SmallEngine(comm, {"a", "b"}, {{10}, {2, 3}});
    s = g->Load(dir, "t");
    EXPECT_NE(s.message().find("'b' (checkpoint [6], engine [2, 3])"), std::string::npos) << s;
    // allow_missing: 'c' keeps its initial values, 'a' and 'b' load.
    auto h = SmallEngine(comm, {"a", "b", "c"}, {{10}, {6}, {4}});
    ckpt::LoadOptions o;
    EXPECT_FALSE(h->Load(dir, "t", o).ok());
    o.allow_missing = true;
    EXPECT_TRUE(h->Load(dir, "t", o).ok());
    std::vector<float> v(4);
    ASSERT_TRUE(h->ReadMaster(2, v.data()).ok());
    EXPECT_EQ(v[0], 2.5f);
    (void)rank;
  });
}

TEST(CkptTest, SavingATagAgainReplacesItWhole) {
  const std::string dir = TmpDir("overwrite");
  MlpSpec spec;
  spec.ckpt_dir = dir;
  spec.final_tag = "x";
  spec.steps = 2;
  TrainAt(BaseConfig(2, DType::kF32), 3, spec);
  spec.steps = 4;
  TrainAt(BaseConfig(1, DType::kF32), 2, spec);  // fewer ranks: fewer files
  auto ck = Checkpoint::Open(dir, "x");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ((*ck)->manifest().global_step, 4);
  EXPECT_EQ((*ck)->manifest().world_size, 2);
  EXPECT_FALSE(ckpt::Exists(dir + "/x/rank_00002.bin"));
  EXPECT_FALSE(ckpt::Exists(dir + "/.x.partial"));
  EXPECT_TRUE((*ck)->Verify().ok());
}

// ---- Crash safety ----------------------------------------------------------------

std::string Slurp(const std::string& path) {
  auto s = ckpt::ReadFile(path);
  return s.ok() ? *s : std::string("<unreadable>");
}

TEST(CkptTest, InterruptedSaveLeavesPreviousTagAndLatest) {
  const std::string dir = TmpDir("interrupted");
  Config c = BaseConfig(2, DType::kF32);
  MlpSpec spec;
  std::vector<absl::Status> got(3);
  RunThreads(3, [&](int rank, Communicator* comm) {
    auto e = MakeMlpEngine(c, comm, spec);
    ASSERT_TRUE(e.ok());
    ASSERT_TRUE((*e)->Save(dir, "A").ok());
    ckpt::SaveOptions o;
    // Rank 1 dies half-way through its file.
    if (rank == 1) o.progress = [](int64_t done, int64_t total) { return done * 2 < total; };
    got[rank] = (*e)->Save(dir, "B", o);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(absl::IsCancelled(got[r])) << "rank " << r << ": " << got[r];
    EXPECT_NE(got[r].message().find("rank_00001.bin"), std::string::npos) << got[r];
  }
  EXPECT_EQ(Slurp(dir + "/latest"), "A\n");
  EXPECT_FALSE(ckpt::Exists(dir + "/B"));
  EXPECT_TRUE(ckpt::Exists(dir + "/.B.partial/rank_00001.bin.tmp"));
  RunThreads(2, [&](int, Communicator* comm) {
    auto e = MakeMlpEngine(c, comm, spec);
    ASSERT_TRUE(e.ok());
    EXPECT_TRUE((*e)->Load(dir, "").ok());
    absl::Status s = (*e)->Load(dir, "B");
    EXPECT_TRUE(absl::IsNotFound(s)) << s;
  });
}

TEST(CkptTest, KilledSaveLeavesPreviousTagAndLatest) {
  const std::string dir = TmpDir("killed");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Before this test the process ran no OpenMP or comm threads; exec anyway
    // to start clean.
    execl("tests/ckpt_crash_helper", "ckpt_crash_helper", dir.c_str(), (char*)nullptr);
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "helper exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(Slurp(dir + "/latest"), "A\n");
  EXPECT_FALSE(ckpt::Exists(dir + "/B"));
  auto ck = Checkpoint::Open(dir, "");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ((*ck)->manifest().tag, "A");
  EXPECT_TRUE((*ck)->Verify(nullptr).ok());
  MlpSpec spec;
  RunThreads(2, [&](int, Communicator* comm) {
    auto e = MakeMlpEngine(BaseConfig(1, DType::kF32), comm, spec);
    ASSERT_TRUE(e.ok());
    EXPECT_TRUE((*e)->Load(dir, "").ok());
  });
}

// ---- Corruption -------------------------------------------------------------------

std::string SaveSmall(const std::string& name) {
  const std::string dir = TmpDir(name);
  MlpSpec spec;
  spec.ckpt_dir = dir;
  spec.steps = 2;
  spec.final_tag = "t";
  TrainAt(BaseConfig(2, DType::kF32), 2, spec);
  return dir;
}

std::vector<absl::Status> LoadAll(const std::string& dir, int world) {
  MlpSpec spec;
  spec.resume_dir = dir;
  spec.resume_tag = "t";
  return TrainStatuses(BaseConfig(2, DType::kF32), world, spec);
}

TEST(CkptTest, FlippedByteIsRefusedNamingFileAndSection) {
  const std::string dir = SaveSmall("flipped");
  const std::string file = dir + "/t/rank_00001.bin";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(10);
    char b;
    f.read(&b, 1);
    b ^= 0x01;
    f.seekp(10);
    f.write(&b, 1);
  }
  for (const absl::Status& s : LoadAll(dir, 2)) {
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_NE(s.message().find("rank_00001.bin: section '"), std::string::npos) << s;
    EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s;
  }
  auto ck = Checkpoint::Open(dir, "t");
  ASSERT_TRUE(ck.ok());
  absl::Status v = (*ck)->Verify(nullptr);
  EXPECT_TRUE(absl::IsDataLoss(v)) << v;
  EXPECT_NE(v.message().find("rank_00001.bin"), std::string::npos) << v;
}

TEST(CkptTest, ChecksumFailureDuringLoadLeavesTheEngineUnusable) {
  const std::string dir = SaveSmall("poison");
  {
    std::fstream f(dir + "/t/rank_00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    char b;
    f.read(&b, 1);
    b ^= 0x40;
    f.seekp(0);
    f.write(&b, 1);
  }
  RunThreads(2, [&](int, Communicator* comm) {
    auto e = MakeMlpEngine(BaseConfig(2, DType::kF32), comm, MlpSpec());
    ASSERT_TRUE(e.ok());
    absl::Status s = (*e)->Load(dir, "t");
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_NE(s.message().find("create a new engine"), std::string::npos) << s;
    EXPECT_FALSE((*e)->Step().ok());
  });
}

TEST(CkptTest, TruncatedShardIsRefused) {
  const std::string dir = SaveSmall("truncated");
  const std::string file = dir + "/t/rank_00000.bin";
  auto size = ckpt::FileSize(file);
  ASSERT_TRUE(size.ok());
  ASSERT_EQ(truncate(file.c_str(), *size - 100), 0);
  for (const absl::Status& s : LoadAll(dir, 3)) {
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_NE(s.message().find("rank_00000.bin: truncated"), std::string::npos) << s;
  }
}

// Sets the shape of param #1 (fc1.weight) in the manifest of DIR/t.
TEST(CkptTest, RankFileFromAnotherSaveIsRefused) {
  const std::string a = SaveSmall("mixed_a");
  MlpSpec spec;
  spec.ckpt_dir = TmpDir("mixed_b");
  spec.steps = 3;  // same layout, other values
  spec.final_tag = "t";
  TrainAt(BaseConfig(2, DType::kF32), 2, spec);
  auto text = ckpt::ReadFile(spec.ckpt_dir + "/t/rank_00001.bin");
  ASSERT_TRUE(text.ok());
  std::ofstream(a + "/t/rank_00001.bin", std::ios::binary) << *text;
  for (const absl::Status& s : LoadAll(a, 2)) {
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_NE(s.message().find("rank_00001.bin: the section index differs"), std::string::npos) << s;
  }
}

TEST(CkptTest, NoTagAndNoLatestIsNotFound) {
  const std::string dir = TmpDir("empty");
  ASSERT_TRUE(ckpt::MakeDirs(dir).ok());
  auto ck = Checkpoint::Open(dir, "");
  EXPECT_TRUE(absl::IsNotFound(ck.status())) << ck.status();
  EXPECT_NE(ck.status().message().find("latest"), std::string::npos) << ck.status();
}

void EditShape(const std::string& dir, std::vector<int64_t> shape) {
  const std::string path = dir + "/t/manifest.json";
  auto j = nlohmann::ordered_json::parse(Slurp(path));
  ASSERT_EQ(j["params"][1]["name"], "fc1.weight");
  j["params"][1]["shape"] = shape;
  std::ofstream(path) << j.dump(1);
}

TEST(CkptTest, ManifestWithWrongShapeIsRefused) {
  const std::string dir = SaveSmall("badshape");
  // fc1.weight [25, 8] -> [25, 9]: no longer matches its element count.
  EditShape(dir, {25, 9});
  for (const absl::Status& s : LoadAll(dir, 2)) {
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_NE(s.message().find("manifest.json: param 'fc1.weight': shape [25, 9] has 225 elements but numel is 200"),
              std::string::npos) << s;
  }
  // [25, 8] -> [8, 25]: consistent, but not the engine's shape.
  const std::string dir2 = SaveSmall("transposed");
  EditShape(dir2, {8, 25});
  for (const absl::Status& s : LoadAll(dir2, 2)) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("'fc1.weight' (checkpoint [8, 25], engine [25, 8])"), std::string::npos) << s;
  }
}

TEST(CkptTest, ProgressReportsBytesUpToTotal) {
  const std::string dir = TmpDir("progress");
  MlpSpec spec;
  RunThreads(2, [&](int rank, Communicator* comm) {
    auto e = MakeMlpEngine(BaseConfig(3, DType::kF32), comm, spec);
    ASSERT_TRUE(e.ok());
    int64_t last = -1, total = 0;
    bool monotonic = true;
    ckpt::SaveOptions so;
    so.progress = [&](int64_t done, int64_t t) {
      monotonic = monotonic && done > last;
      last = done;
      total = t;
      return true;
    };
    ASSERT_TRUE((*e)->Save(dir, "p", so).ok());
    EXPECT_TRUE(monotonic);
    EXPECT_EQ(last, total);
    EXPECT_GT(total, 0);
    last = -1;
    ckpt::LoadOptions lo;
    lo.progress = so.progress;
    ASSERT_TRUE((*e)->Load(dir, "p", lo).ok());
    EXPECT_EQ(last, total) << "rank " << rank;
  });
}

}  // namespace
}  // namespace testing
}  // namespace zero
