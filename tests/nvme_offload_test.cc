// offload_optimizer.device = "nvme": master weights and Adam moments live in
// files under nvme_path and stream through a few host buffers. Training ends
// bitwise where in-memory training ends (same kernels, same order), host
// memory for optimizer state stays under buffer_count sub-groups, and broken
// paths or files are clear errors.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/thread_communicator.h"
#include "core/common/dtype.h"
#include "core/engine/optimizer_boundary.h"
#include "core/engine/engine.h"
#include "tests/testing/fresh_dir.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(dir + "/" + n);
  }
  ::closedir(d);
  return out;
}

Config BaseConfig(int stage, DType dtype) {
  Config c = SmallMlpConfig(stage, dtype);
  c.sub_group_size = 96;  // several groups, each a few chunks
  return c;
}

Config Nvme(Config c, const std::string& dir) {
  c.offload_optimizer.device = OffloadDevice::kNvme;
  c.offload_optimizer.nvme_path = dir;
  c.offload_optimizer.buffer_count = 3;
  return c;
}

// Master params bitwise equal; and, unless one run resumed mid-way, every
// step's norm and skip flag.
void ExpectBitwiseEqual(const MlpResult& a, const MlpResult& b, bool steps = true) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_EQ(a.params[i].size(), b.params[i].size());
    for (size_t j = 0; j < a.params[i].size(); ++j) {
      ASSERT_EQ(a.params[i][j], b.params[i][j]) << a.names[i] << "[" << j << "]";
    }
  }
  if (!steps) return;
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(a.steps[s].grad_norm, b.steps[s].grad_norm) << "step " << s;
    EXPECT_EQ(a.steps[s].skipped, b.steps[s].skipped) << "step " << s;
  }
}

class NvmeOffloadTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// The kernels are elementwise and run in the same order, so streaming the
// state through files changes no bit, in any dtype.
TEST_P(NvmeOffloadTest, TrainsBitwiseLikeInMemory) {
  const int stage = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const DType dtype = static_cast<DType>(std::get<2>(GetParam()));
  Config c = BaseConfig(stage, dtype);
  MlpSpec spec;
  if (dtype == DType::kF16) spec.inf_step = 4;  // a skipped step on the way
  MlpResult mem = TrainAt(c, world, spec);
  const std::string dir = FreshDir("nvme");
  MlpResult nvme = TrainAt(Nvme(c, dir), world, spec);
  ExpectBitwiseEqual(nvme, mem);
  EXPECT_EQ(nvme.stats.master_bytes, 0);
  EXPECT_GT(nvme.stats.nvme_bytes, 0);
  EXPECT_GT(nvme.stats.nvme_write_bytes, 0);
  EXPECT_TRUE(FilesIn(dir).empty()) << "state files left after destroy";
}

INSTANTIATE_TEST_SUITE_P(
    StagesWorldsDtypes, NvmeOffloadTest,
    ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(1, 3),
                       ::testing::Values(0, 1, 2)),
    [](const ::testing::TestParamInfo<NvmeOffloadTest::ParamType>& i) {
      return "stage" + std::to_string(std::get<0>(i.param)) + "_world" +
             std::to_string(std::get<1>(i.param)) + "_" +
             DTypeName(static_cast<DType>(std::get<2>(i.param)));
    });

TEST(NvmeOffload, SgdWithMomentumTrainsBitwiseLikeInMemory) {
  Config c = BaseConfig(2, DType::kF32);
  c.optimizer = OptimizerType::kSgd;
  c.momentum = 0.9;
  MlpSpec spec;
  MlpResult mem = TrainAt(c, 3, spec);
  MlpResult nvme = TrainAt(Nvme(c, FreshDir("sgd")), 3, spec);
  ExpectBitwiseEqual(nvme, mem);
}

// Optimizer state larger than the host may hold for it: buffer_count
// sub-groups of 2048 elements (4 x 2048 x 12 bytes = 96 KiB) for ~220 KiB of
// master + m + v.
TEST(NvmeOffload, HostBytesStayUnderTheCapWhileStateIsLarger) {
  Config c = BaseConfig(1, DType::kF32);
  c.sub_group_size = 2048;
  MlpSpec spec;
  spec.in = 64;
  spec.hidden = 256;
  spec.out = 8;
  spec.steps = 4;
  Config n = Nvme(c, FreshDir("cap"));
  n.offload_optimizer.buffer_count = 4;
  const int64_t cap = 4 * 2048 * 12;
  MlpResult mem = TrainAt(c, 1, spec);
  MlpResult nvme = TrainAt(n, 1, spec);
  ExpectBitwiseEqual(nvme, mem);
  const int64_t state = nvme.stats.trainable_numel * 12;
  EXPECT_GT(state, 2 * cap);
  // In memory the fp32 master is the working copy's owned range: m and v.
  EXPECT_EQ(mem.stats.master_bytes + mem.stats.optimizer_bytes,
            nvme.stats.padded_numel * 8);
  EXPECT_GT(nvme.stats.optimizer_bytes, 0);
  EXPECT_LE(nvme.stats.master_bytes + nvme.stats.optimizer_bytes, cap);
  EXPECT_GE(nvme.stats.nvme_bytes, state);  // one slot on disk
  EXPECT_LT(nvme.stats.nvme_bytes, 2 * state);
  // Every step reads and writes all of it once.
  EXPECT_GE(nvme.stats.nvme_write_bytes, (spec.steps + 1) * state);
}

// offload_*.atomic_step: two slots per file (twice the disk), the same bits.
TEST(NvmeOffload, AtomicStepTrainsBitwiseLikeOneSlotAtTwiceTheDisk) {
  Config c = BaseConfig(3, DType::kBF16);
  MlpSpec spec;
  const std::string dir = FreshDir("atomic");
  Config one = Nvme(c, dir);
  one.offload_param.device = OffloadDevice::kNvme;
  one.offload_param.nvme_path = dir;
  Config two = one;
  two.offload_optimizer.atomic_step = true;
  two.offload_param.atomic_step = true;
  MlpResult mem = TrainAt(c, 3, spec);
  MlpResult a = TrainAt(one, 3, spec);
  MlpResult b = TrainAt(two, 3, spec);
  ExpectBitwiseEqual(a, mem);
  ExpectBitwiseEqual(b, mem);
  // Two slots of the optimizer state and the params; stage 3's gradient
  // files stay one slot (at least the in-memory gradient partition's bytes).
  EXPECT_GE(a.stats.nvme_grad_bytes, mem.stats.grad_bytes);
  EXPECT_GT(mem.stats.grad_bytes, 0);
  EXPECT_EQ(b.stats.nvme_grad_bytes, a.stats.nvme_grad_bytes);
  EXPECT_EQ(b.stats.nvme_bytes,
            2 * (a.stats.nvme_bytes - a.stats.nvme_grad_bytes) + a.stats.nvme_grad_bytes);
  EXPECT_TRUE(FilesIn(dir).empty());
}

// Stage 3 with the optimizer on NVMe streams the gradient partitions through
// files too (ZeRO-Infinity): accumulation over micro-steps (a group's first
// partial touch zeroes its file, later touches read-modify-write) ends
// bitwise where in-memory accumulation ends, with and without the param
// files, in every dtype; the gradients take no host memory.
TEST(NvmeOffload, Stage3GradientAccumulationThroughFilesIsBitwise) {
  for (int dt = 0; dt < 3; ++dt) {
    for (int world : {1, 3}) {
      Config c = BaseConfig(3, static_cast<DType>(dt));
      c.gradient_accumulation_steps = 3;
      MlpSpec spec;
      spec.steps = 5;
      if (dt == 1) spec.inf_step = 2;  // fp16: a skipped step zeroes the files' gradients
      MlpResult mem = TrainAt(c, world, spec);
      const std::string dir = FreshDir("gas");
      Config n = Nvme(c, dir);
      MlpResult opt = TrainAt(n, world, spec);
      n.offload_param.device = OffloadDevice::kNvme;
      n.offload_param.nvme_path = dir;
      MlpResult all = TrainAt(n, world, spec);
      ExpectBitwiseEqual(opt, mem);
      ExpectBitwiseEqual(all, mem);
      EXPECT_EQ(opt.stats.grad_bytes, 0);
      EXPECT_GT(mem.stats.grad_bytes, 0);
      EXPECT_TRUE(FilesIn(dir).empty());
    }
  }
}

// Stage 3 with both offloads: the update's gradient reads ahead and param
// writes behind on IO threads (core/engine/update_io_pipeline.h) against the
// blocking path they replaced and against memory: the same bits, with the
// shallowest ring (buffer_count 2) and a deeper one, pieces 4 KiB-aligned in
// the files (2048 bf16) and not (96), worlds 1 and 3. The pipeline's
// buffers show it ran.
TEST(NvmeOffload, Stage3UpdateIoPipelineIsBitwiseLikeBlockingIo) {
  for (int64_t sub : {96, 2048}) {
    for (int depth : {2, 4}) {
      for (int world : {1, 3}) {
        Config c = BaseConfig(3, DType::kBF16);
        c.sub_group_size = sub;
        MlpSpec spec;
        MlpResult mem = TrainAt(c, world, spec);
        const std::string dir = FreshDir("piped");
        Config n = Nvme(c, dir);
        n.offload_optimizer.buffer_count = depth;
        n.offload_param.device = OffloadDevice::kNvme;
        n.offload_param.nvme_path = dir;
        Config b = n;
        b.engine_paths.update_io_pipeline = false;
        MlpResult blocking = TrainAt(b, world, spec);
        MlpResult piped = TrainAt(n, world, spec);
        SCOPED_TRACE("sub_group_size " + std::to_string(sub) + ", buffer_count " +
                     std::to_string(depth) + ", world " + std::to_string(world));
        ExpectBitwiseEqual(blocking, mem);
        ExpectBitwiseEqual(piped, mem);
        // 2 x depth buffers of the largest piece (bf16) on rank 0.
        EXPECT_GE(piped.stats.buffer_bytes - blocking.stats.buffer_bytes, 2 * depth * 2)
            << "the pipeline did not run";
        EXPECT_TRUE(FilesIn(dir).empty());
      }
    }
  }
}

TEST(NvmeOffload, MissingPathIsAClearError) {
  Config c = Nvme(BaseConfig(2, DType::kF32), "/nonexistent/zero_nvme");
  MlpSpec spec;
  auto comms = MakeThreadCommunicators(1);
  auto r = TrainMlp(c, comms[0].get(), spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_NE(r.status().message().find("offload_optimizer.nvme_path '/nonexistent/zero_nvme'"),
            std::string::npos) << r.status();
}

TEST(NvmeOffload, UnwritablePathIsAClearError) {
  Config c = Nvme(BaseConfig(2, DType::kF32), "/sys");  // refuses even root
  MlpSpec spec;
  auto comms = MakeThreadCommunicators(1);
  auto r = TrainMlp(c, comms[0].get(), spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
}

// Stage 3, offload_param "nvme": each rank's shard of the working copy lives
// in a file; gathers read their slice from it. With the optimizer on NVMe
// too, only gathered params, persistent small params and buffers stay in
// host memory.
class NvmeParamTest : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

TEST_P(NvmeParamTest, Stage3ParamsOnNvmeTrainBitwiseLikeInMemory) {
  const int world = std::get<0>(GetParam());
  const DType dtype = static_cast<DType>(std::get<1>(GetParam()));
  const bool optimizer_too = std::get<2>(GetParam());
  Config c = BaseConfig(3, dtype);
  MlpSpec spec;
  MlpResult mem = TrainAt(c, world, spec);
  const std::string dir = FreshDir("param");
  Config n = optimizer_too ? Nvme(c, dir) : c;
  n.offload_param.device = OffloadDevice::kNvme;
  n.offload_param.nvme_path = dir;
  MlpResult got = TrainAt(n, world, spec);
  ExpectBitwiseEqual(got, mem);
  EXPECT_LT(got.stats.param_bytes, mem.stats.param_bytes);
  EXPECT_GT(got.stats.nvme_bytes, 0);
  EXPECT_TRUE(FilesIn(dir).empty()) << "files left after destroy";
}

INSTANTIATE_TEST_SUITE_P(
    WorldsDtypes, NvmeParamTest,
    ::testing::Combine(::testing::Values(1, 3), ::testing::Values(0, 1, 2), ::testing::Bool()),
    [](const ::testing::TestParamInfo<NvmeParamTest::ParamType>& i) {
      return "world" + std::to_string(std::get<0>(i.param)) + "_" +
             DTypeName(static_cast<DType>(std::get<1>(i.param))) +
             (std::get<2>(i.param) ? "_optimizer_nvme" : "_optimizer_in_memory");
    });

TEST(NvmeOffload, ParamOffloadBelowStage3IsRejected) {
  Config c = BaseConfig(2, DType::kF32);
  c.offload_param.device = OffloadDevice::kNvme;
  c.offload_param.nvme_path = FreshDir("p2");
  absl::Status s = c.Resolve(1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("offload_param.device"), std::string::npos) << s;
}

TEST(NvmeOffload, ParamOffloadMissingPathIsAClearError) {
  Config c = BaseConfig(3, DType::kF32);
  c.offload_param.device = OffloadDevice::kNvme;
  c.offload_param.nvme_path = "/nonexistent/zero_params";
  MlpSpec spec;
  auto comms = MakeThreadCommunicators(1);
  auto r = TrainMlp(c, comms[0].get(), spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_NE(r.status().message().find("offload_param.nvme_path '/nonexistent/zero_params'"),
            std::string::npos) << r.status();
}

TEST(NvmeOffload, FromDsConfigJson) {
  const std::string dir = FreshDir("json");
  auto c = ParseDsConfig(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 2, "sub_group_size": 1000,
        "offload_optimizer": {"device": "nvme", "nvme_path": ")" + dir + R"(",
                              "buffer_count": 4, "atomic_step": true}},
      "aio": {"block_size": 262144, "queue_depth": 16}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->Resolve(1).ok());
  EXPECT_TRUE(c->offload_optimizer.atomic_step);
  EXPECT_FALSE(c->offload_param.atomic_step);
}

// Drives one engine by hand: one 5000-element param, constant gradients.
class ManualEngine {
 public:
  explicit ManualEngine(const std::string& dir) : comms_(MakeThreadCommunicators(1)) {
    Config c = Nvme(BaseConfig(2, DType::kF32), dir);
    c.sub_group_size = 1024;
    auto e = Engine::Create(c, comms_[0].get());
    EXPECT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
    ParamSpec p;
    p.name = "w";
    p.shape = {5000};
    EXPECT_TRUE(engine_->RegisterParam(p).ok());
    EXPECT_TRUE(engine_->Finalize().ok());
  }
  absl::Status Step() {
    auto g = engine_->GradBuffer(0);
    if (!g.ok()) return g.status();
    float* d = static_cast<float*>(*g);
    for (int i = 0; i < 5000; ++i) d[i] = 0.001f * (i % 7 - 3);
    absl::Status s = engine_->GradReady(0);
    if (!s.ok()) return s;
    return engine_->Step().status();
  }
  Engine* engine() { return engine_.get(); }
  void Destroy() { engine_.reset(); }

 private:
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::unique_ptr<Engine> engine_;
};

// Checkpoints see NVMe-held state like in-memory state: a run saved with
// NVMe offload resumes in memory, and the other way round, bitwise equal to
// the uninterrupted in-memory run.
TEST(NvmeOffload, CheckpointsMoveBetweenNvmeAndMemoryBitwise) {
  for (int stage : {1, 3, 4}) {
    // 4: stage 3 in bf16.
    Config mem = stage == 4 ? BaseConfig(3, DType::kBF16) : BaseConfig(stage, DType::kF32);
    stage = std::min(stage, 3);
    Config nv = Nvme(mem, FreshDir("ck_nvme"));
    if (stage == 3) {
      nv.offload_param.device = OffloadDevice::kNvme;
      nv.offload_param.nvme_path = nv.offload_optimizer.nvme_path;
    }
    MlpSpec full;
    full.ckpt_dir = FreshDir("ck_full");
    full.save_after = 5;
    MlpResult a = TrainAt(mem, 3, full);

    MlpSpec from_mem;
    from_mem.resume_dir = full.ckpt_dir;
    from_mem.resume_tag = "mid";
    MlpResult b = TrainAt(nv, 3, from_mem);
    ASSERT_EQ(b.steps.size(), 5u);
    ExpectBitwiseEqual(b, a, /*steps=*/false);

    MlpSpec nvme_full = full;
    nvme_full.ckpt_dir = FreshDir("ck_nvme_full");
    MlpResult c = TrainAt(nv, 3, nvme_full);
    ExpectBitwiseEqual(c, a);
    MlpSpec from_nvme;
    from_nvme.resume_dir = nvme_full.ckpt_dir;
    from_nvme.resume_tag = "mid";
    MlpResult d = TrainAt(mem, 3, from_nvme);
    ASSERT_EQ(d.steps.size(), 5u);
    ExpectBitwiseEqual(d, a, /*steps=*/false);
    EXPECT_TRUE(FilesIn(nv.offload_optimizer.nvme_path).empty());
  }
}

// Checkpoints read and restore the owned state the same way, in memory or
// on NVMe.
TEST(NvmeOffload, OwnedStateReadsAndWritesWhereverItLives) {
  for (bool nvme : {false, true}) {
    Config c = BaseConfig(2, DType::kF32);
    c.sub_group_size = 1024;
    if (nvme) c = Nvme(c, FreshDir("state"));
    auto comms = MakeThreadCommunicators(1);
    auto e = Engine::Create(c, comms[0].get());
    ASSERT_TRUE(e.ok()) << e.status();
    ParamSpec p;
    p.name = "w";
    p.shape = {3000};
    std::vector<float> init(3000);
    for (int i = 0; i < 3000; ++i) init[i] = 0.5f * i;
    p.init = init.data();
    ASSERT_TRUE((*e)->RegisterParam(p).ok());
    ASSERT_TRUE((*e)->Finalize().ok());
    std::vector<float> got(1500);
    ASSERT_TRUE((*e)->ReadOwnedState(0, 0, 1000, 1500, got.data()).ok());
    for (int i = 0; i < 1500; ++i) ASSERT_EQ(got[i], 0.5f * (1000 + i));
    std::vector<float> v(1500, 0.25f);
    ASSERT_TRUE((*e)->WriteOwnedState(0, 2, 1000, 1500, v.data()).ok());
    ASSERT_TRUE((*e)->ReadOwnedState(0, 2, 0, 3000, init.data()).ok());
    for (int i = 0; i < 3000; ++i) {
      ASSERT_EQ(init[i], i >= 1000 && i < 2500 ? 0.25f : 0.0f) << "nvme " << nvme << " " << i;
    }
    EXPECT_FALSE((*e)->ReadOwnedState(0, 0, 2999, 100, got.data()).ok());
  }
}

// Gradient files hold one written range per group since the last step
// (zeros elsewhere): params skipped in a step (gaps the range must zero),
// buckets out of order and partial buckets, then accumulation over them,
// give the bits of the in-memory run.
TEST(NvmeOffload, Stage3GradientFilesWithSkippedParamsAreBitwise) {
  auto run = [](bool nvme) {
    Config c = BaseConfig(3, DType::kBF16);
    c.sub_group_size = 1 << 20;  // one group holds every param
    c.reduce_bucket_size = 70;   // buckets cut params
    c.reduce_bucket_size_auto = false;
    c.gradient_accumulation_steps = 2;
    if (nvme) c = Nvme(c, FreshDir("gaps"));
    auto comms = MakeThreadCommunicators(1);
    auto e = Engine::Create(c, comms[0].get());
    EXPECT_TRUE(e.ok()) << e.status();
    const int kParams = 5, kNumel = 333;
    std::vector<float> init(kNumel);
    for (int p = 0; p < kParams; ++p) {
      for (int i = 0; i < kNumel; ++i) init[i] = 0.01f * ((i * 7 + p * 3) % 23 - 11);
      ParamSpec s;
      s.name = "w" + std::to_string(p);
      s.shape = {kNumel};
      s.dtype = DType::kBF16;
      s.init = init.data();
      auto id = (*e)->RegisterParam(s);
      EXPECT_TRUE(id.ok()) << id.status();
    }
    EXPECT_TRUE((*e)->Finalize().ok());
    // Per micro-step, the params that get a gradient, in order.
    const std::vector<std::vector<int>> order = {
        {4, 2}, {0}, {3, 1}, {1, 4, 0}, {2}, {}, {0, 1, 2, 3, 4}, {3}};
    std::vector<float> g(kNumel);
    for (size_t m = 0; m < order.size(); ++m) {
      for (int p : order[m]) {
        auto buf = (*e)->GradBuffer(p);
        EXPECT_TRUE(buf.ok()) << buf.status();
        for (int i = 0; i < kNumel; ++i) g[i] = 0.001f * ((i + 5 * p + 3 * m) % 13 - 6);
        (*e)->device()->UploadF32(g.data(), *buf, DType::kBF16, kNumel);
        EXPECT_TRUE((*e)->GradReady(p).ok());
      }
      auto info = (*e)->Step();
      EXPECT_TRUE(info.ok()) << info.status();
    }
    std::vector<float> out(kParams * kNumel);
    for (int p = 0; p < kParams; ++p) {
      EXPECT_TRUE((*e)->ReadOwnedState(0, 0, p * kNumel, kNumel, out.data() + p * kNumel).ok());
    }
    return out;
  };
  const std::vector<float> mem = run(false), file = run(true);
  ASSERT_EQ(mem.size(), file.size());
  for (size_t i = 0; i < mem.size(); ++i) ASSERT_EQ(mem[i], file[i]) << i;
}

TEST(NvmeOffload, FileTruncatedBetweenStepsIsAClearErrorNotACrash) {
  const std::string dir = FreshDir("trunc");
  ManualEngine m(dir);
  ASSERT_TRUE(m.Step().ok());
  std::vector<std::string> files;
  for (const std::string& f : FilesIn(dir)) {
    if (f.size() > 4 && f.substr(f.size() - 4) == ".swp") files.push_back(f);
  }
  ASSERT_EQ(files.size(), 1u);
  ASSERT_EQ(::truncate(files[0].c_str(), 100), 0);
  absl::Status s = m.Step();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
  EXPECT_NE(s.message().find(files[0]), std::string::npos) << s;
  // The engine refuses further work instead of training on lost state.
  EXPECT_FALSE(m.Step().ok());
  m.Destroy();
  EXPECT_TRUE(FilesIn(dir).empty());
}

TEST(NvmeOffload, FilesExistWhileTrainingAndGoAwayOnDestroy) {
  const std::string dir = FreshDir("life");
  ManualEngine m(dir);
  ASSERT_TRUE(m.Step().ok());
  ASSERT_TRUE(m.Step().ok());
  EXPECT_EQ(FilesIn(dir).size(), 2u);  // the state file and the claim's lock
  EngineStats st = m.engine()->Stats();
  EXPECT_EQ(st.nvme_bytes, 5 * 3 * 4096);  // 5 chunks x 3 arrays x 4 KiB, one slot
  std::printf("direct_io=%d uring=%d note='%s'\n", st.nvme_direct_io, st.nvme_uring,
              st.offload_note.c_str());
  m.Destroy();
  EXPECT_TRUE(FilesIn(dir).empty());
}

}  // namespace
}  // namespace testing
}  // namespace zero
