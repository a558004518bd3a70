// 8-bit block-quantised Adam moments (optimizer.moments_format "8bit") in
// the NVMe optimizer tier (offload_optimizer.device "nvme"; docs/ARCHITECTURE.md
// "Optimizer state formats"): the files hold the packed blocks, so a run
// streams the same q8 math through them and gives the in-memory 8-bit run's
// bits after every step (master and decoded moments, read through
// read_owned_state), at stages 1-3, worlds 1 and 3, fp32 and bf16, on the
// CPU device and on an off-host stand-in (the pieces staged through device
// buffers); checkpoints (fp32 moments) saved at 3 ranks from NVMe load at 2
// ranks into NVMe and into memory and continue alike; owned-state reads and
// writes at unaligned ranges match memory's; the files' bytes on disk per
// param match the formula (master 4 + 136/64 for the moments) and the
// estimator, and the estimator's staging bytes match zero_stats.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/comm/thread_communicator.h"
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/estimate/memory_estimate.h"
#include "kernels/moments_format_math.h"
#include "tests/testing/fresh_dir.h"
#include "tests/testing/mlp_estimate_params.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/off_host_device.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

constexpr int64_t kFileAlign = 4096;  // NvmeTier's region alignment

int64_t RoundUp(int64_t x) { return (x + kFileAlign - 1) / kFileAlign * kFileAlign; }

Config Q8Config(int stage, DType dtype) {
  Config c = SmallMlpConfig(stage, dtype);
  c.sub_group_size = 128;  // several groups and NVMe chunks per group
  c.moments_format = MomentsFormat::kQ8;
  return c;
}

Config OnNvme(Config c, const std::string& dir) {
  c.offload_optimizer.device = OffloadDevice::kNvme;
  c.offload_optimizer.nvme_path = dir;
  c.offload_optimizer.buffer_count = 3;  // read-ahead and write-behind
  return c;
}

// Every rank's owned state (master, exp_avg, exp_avg_sq as fp32) before
// each step: [rank][snapshot] -> the arrays of every group, concatenated
// (the state after the last step shows in the final params).
struct StateLog {
  std::mutex mu;
  std::map<int, std::vector<std::vector<float>>> by_rank;
};

absl::Status Snapshot(Engine* e, StateLog* log) {
  const EngineStats st = e->Stats();
  std::vector<float> all;
  const std::vector<LayoutGroup>& groups = e->layout().groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t owned = st.stage == 0 ? groups[g].padded : groups[g].shard;
    std::vector<float> a(owned);
    for (int array = 0; array < 3; ++array) {
      absl::Status s = e->ReadOwnedState(static_cast<int>(g), array, 0, owned, a.data());
      if (!s.ok()) return s;
      all.insert(all.end(), a.begin(), a.end());
    }
  }
  std::lock_guard<std::mutex> l(log->mu);
  log->by_rank[st.rank].push_back(std::move(all));
  return absl::OkStatus();
}

// Trains with every rank's owned state logged before every step (the
// first: the initial state; later ones: after the step before).
MlpResult TrainLogged(const Config& c, int world, MlpSpec spec, StateLog* log) {
  spec.hook = [log](Engine* e, int, int index) {
    return index == -1 ? Snapshot(e, log) : absl::OkStatus();
  };
  return TrainAt(c, world, spec);
}

void ExpectSameLogs(const StateLog& a, const StateLog& b, const std::string& what) {
  ASSERT_EQ(a.by_rank.size(), b.by_rank.size()) << what;
  for (const auto& [rank, snaps] : a.by_rank) {
    const auto& other = b.by_rank.at(rank);
    ASSERT_EQ(snaps.size(), other.size()) << what << " rank " << rank;
    for (size_t s = 0; s < snaps.size(); ++s) {
      ASSERT_EQ(snaps[s].size(), other[s].size());
      for (size_t i = 0; i < snaps[s].size(); ++i) {
        ASSERT_EQ(snaps[s][i], other[s][i])
            << what << " rank " << rank << " before step " << s << " state element " << i;
      }
    }
  }
}

// Master params bitwise equal, and every step's norm and skip flag.
void ExpectBitwise(const MlpResult& a, const MlpResult& b, bool steps = true) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_EQ(a.params[i], b.params[i]) << a.names[i];
  }
  if (!steps) return;
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(a.steps[s].grad_norm, b.steps[s].grad_norm) << "step " << s;
    EXPECT_EQ(a.steps[s].skipped, b.steps[s].skipped) << "step " << s;
  }
}

// The optimizer-state files under dir (rank < 0: every rank's), named
// zero_r<rank>_..._optim_g<g>.swp by NvmeTier and SwapDir.
std::vector<std::string> StateFiles(const std::string& dir, int rank = -1) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  const std::string mine = "zero_r" + std::to_string(rank) + "_";
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.find("_optim_g") == std::string::npos || n.size() < 4 ||
        n.substr(n.size() - 4) != ".swp") {
      continue;
    }
    if (rank < 0 || n.compare(0, mine.size(), mine) == 0) out.push_back(dir + "/" + n);
  }
  ::closedir(d);
  return out;
}

int64_t FileBytes(const std::string& dir, int rank = -1) {
  int64_t n = 0;
  for (const std::string& f : StateFiles(dir, rank)) {
    struct stat st;
    EXPECT_EQ(::stat(f.c_str(), &st), 0) << f;
    n += st.st_size;
  }
  return n;
}

// The tier's file bytes for owned group lengths `lens`, from the format's
// definition: per chunk of at most `chunk` elements the master (4 bytes
// per element) and the blocks (2 * 64 code bytes and two fp32 absmax per
// 64 elements), each padded to 4 KiB; per slot.
int64_t FormulaBytes(const std::vector<int64_t>& lens, int64_t chunk, int slots) {
  int64_t bytes = 0;
  for (int64_t len : lens) {
    for (int64_t b = 0; b < len; b += chunk) {
      const int64_t n = std::min(chunk, len - b);
      bytes += RoundUp(4 * n) + RoundUp((n + 63) / 64 * (2 * 64 + 2 * 4));
    }
  }
  return slots * bytes;
}

class Q8NvmeTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// The tier moves the packed blocks, the arithmetic is the in-memory
// store's: the same bits before every step, in the master and in the
// moments as they decode.
TEST_P(Q8NvmeTest, EqualsEightBitInMemoryStepByStep) {
  const int stage = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const DType dtype = static_cast<DType>(std::get<2>(GetParam()));
  const Config c = Q8Config(stage, dtype);
  MlpSpec spec;
  spec.steps = 6;
  StateLog mem_log, nvme_log;
  const MlpResult mem = TrainLogged(c, world, spec, &mem_log);
  const std::string dir = FreshDir("q8_nvme");
  const MlpResult nvme = TrainLogged(OnNvme(c, dir), world, spec, &nvme_log);
  ExpectBitwise(nvme, mem);
  ExpectSameLogs(nvme_log, mem_log, "cpu device");
  // The moments moved: a log of zeros would compare equal too.
  bool moved = false;
  for (float x : mem_log.by_rank.at(0).back()) moved |= x != 0.0f;
  EXPECT_TRUE(moved);
  EXPECT_EQ(mem_log.by_rank.at(0).size(), 6u);
  EXPECT_GT(nvme.stats.nvme_write_bytes, 0);
  EXPECT_TRUE(StateFiles(dir).empty()) << "state files left after destroy";

  // Off the host: each piece's master and packed moments go up into the
  // store's device halves and back (NvmeStateStore::Update).
  MlpSpec off = spec;
  off.make_device = [] { return std::make_unique<OffHostDevice>(); };
  StateLog dev_mem_log, dev_nvme_log;
  const MlpResult dev_mem = TrainLogged(c, world, off, &dev_mem_log);
  const MlpResult dev_nvme = TrainLogged(OnNvme(c, FreshDir("q8_nvme_dev")), world, off,
                                         &dev_nvme_log);
  ExpectBitwise(dev_nvme, dev_mem);
  ExpectSameLogs(dev_nvme_log, dev_mem_log, "off-host device");
}

INSTANTIATE_TEST_SUITE_P(
    StagesWorldsDtypes, Q8NvmeTest,
    ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(1, 3),
                       ::testing::Values(static_cast<int>(DType::kF32),
                                         static_cast<int>(DType::kBF16))),
    [](const ::testing::TestParamInfo<Q8NvmeTest::ParamType>& i) {
      return "stage" + std::to_string(std::get<0>(i.param)) + "_world" +
             std::to_string(std::get<1>(i.param)) + "_" +
             DTypeName(static_cast<DType>(std::get<2>(i.param)));
    });

// A checkpoint holds the moments as fp32 (what the blocks decode to); one
// saved at 3 ranks from NVMe loads at 2 ranks into NVMe and into memory,
// and both continue with the same bits, close to the run that never
// stopped (the blocks are the same group blocks at any world size; only
// the gradients' reduction order differs).
TEST(Q8NvmeCheckpoint, SavedAtThreeRanksLoadsAtTwoIntoNvmeAndMemory) {
  for (int stage : {1, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const Config c = Q8Config(stage, DType::kF32);
    MlpSpec full;
    full.ckpt_dir = FreshDir("q8_nvme_ckpt");
    full.save_after = 4;
    const MlpResult through = TrainAt(OnNvme(c, FreshDir("q8_nvme_save")), 3, full);
    ASSERT_EQ(through.steps.size(), 10u);
    MlpSpec resume;
    resume.resume_dir = full.ckpt_dir;
    resume.resume_tag = "mid";
    const MlpResult nvme = TrainAt(OnNvme(c, FreshDir("q8_nvme_load")), 2, resume);
    const MlpResult memory = TrainAt(c, 2, resume);
    ASSERT_EQ(nvme.steps.size(), 6u);
    ExpectBitwise(nvme, memory);
    EXPECT_LE(MaxRelDiff(nvme, through), 1e-6);
    // And back: saved in memory at 3 ranks, loaded into NVMe at 2.
    MlpSpec mem_full = full;
    mem_full.ckpt_dir = FreshDir("q8_mem_ckpt");
    (void)TrainAt(c, 3, mem_full);
    resume.resume_dir = mem_full.ckpt_dir;
    ExpectBitwise(TrainAt(OnNvme(c, FreshDir("q8_nvme_load2")), 2, resume),
                  TrainAt(c, 2, resume));
  }
}

// One engine of one param, world 1: moments written and read through
// read_owned_state/write_owned_state at ranges that start and end inside
// blocks and chunks give memory's values; and the files on disk hold per
// chunk the master (4 bytes per element) and the packed moments (136 bytes
// per 64 elements), each padded to 4 KiB, as zero_stats and the estimator
// say.
struct OneParam {
  std::vector<std::unique_ptr<Communicator>> comms = MakeThreadCommunicators(1);
  std::unique_ptr<Engine> engine;
};

OneParam MakeOneParam(const Config& c, int64_t numel) {
  OneParam o;
  auto e = Engine::Create(c, o.comms[0].get());
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return o;
  ParamSpec p;
  p.name = "w";
  p.shape = {numel};
  std::vector<float> init(numel);
  for (int64_t i = 0; i < numel; ++i) init[i] = 0.001f * static_cast<float>(i % 997);
  p.init = init.data();
  EXPECT_TRUE((*e)->RegisterParam(p).ok());
  EXPECT_TRUE((*e)->Finalize().ok());
  o.engine = std::move(*e);
  return o;
}

TEST(Q8NvmeOwnedState, UnalignedReadsAndWritesMatchMemory) {
  Config c = SmallMlpConfig(2, DType::kF32);
  c.moments_format = MomentsFormat::kQ8;
  c.sub_group_size = 1024;  // chunks of 1024: ranges below cross chunks
  OneParam mem = MakeOneParam(c, 3000);
  OneParam nvme = MakeOneParam(OnNvme(c, FreshDir("q8_state")), 3000);
  ASSERT_TRUE(mem.engine && nvme.engine);
  std::vector<float> m(1500), v(1500);
  for (int i = 0; i < 1500; ++i) {
    m[i] = (i % 7 - 3) * 0.01f * (1 + i % 64);
    v[i] = 1e-4f * (1 + i % 13);
  }
  for (Engine* e : {mem.engine.get(), nvme.engine.get()}) {
    ASSERT_TRUE(e->WriteOwnedState(0, 1, 1000, 1500, m.data()).ok());
    ASSERT_TRUE(e->WriteOwnedState(0, 2, 1000, 1500, v.data()).ok());
    ASSERT_TRUE(e->WriteOwnedState(0, 2, 37, 90, v.data()).ok());  // inside blocks
  }
  for (int array = 0; array < 3; ++array) {
    std::vector<float> a(3000), b(3000);
    ASSERT_TRUE(mem.engine->ReadOwnedState(0, array, 0, 3000, a.data()).ok());
    ASSERT_TRUE(nvme.engine->ReadOwnedState(0, array, 0, 3000, b.data()).ok());
    for (int i = 0; i < 3000; ++i) ASSERT_EQ(b[i], a[i]) << "array " << array << " " << i;
    // A range starting inside a block reads the same values.
    std::vector<float> part(700);
    ASSERT_TRUE(nvme.engine->ReadOwnedState(0, array, 1001, 700, part.data()).ok());
    for (int i = 0; i < 700; ++i) ASSERT_EQ(part[i], a[1001 + i]) << array << " " << i;
  }
  std::vector<float> got(1500);
  ASSERT_TRUE(nvme.engine->ReadOwnedState(0, 1, 1000, 1500, got.data()).ok());
  int moved = 0;
  for (int i = 0; i < 1500; ++i) moved += got[i] != 0.0f;
  EXPECT_GT(moved, 1000);  // the written moments, not zeros
}

TEST(Q8NvmeMemory, FileBytesPerParamMatchFormulaAndEstimate) {
  // 2^15-element chunks pad nothing (4 * 2^15 and 136 * 2^9 are multiples
  // of 4 KiB): exactly 4 + 136/64 = 6.125 bytes per param on disk.
  for (bool atomic : {false, true}) {
    Config c = SmallMlpConfig(1, DType::kF32);
    c.moments_format = MomentsFormat::kQ8;
    c.sub_group_size = 1 << 15;
    const std::string dir = FreshDir("q8_bytes");
    Config nv = OnNvme(c, dir);
    nv.offload_optimizer.atomic_step = atomic;
    const int64_t numel = 3 << 15;
    OneParam o = MakeOneParam(nv, numel);
    ASSERT_TRUE(o.engine);
    const int64_t slots = atomic ? 2 : 1;
    const int64_t on_disk = FileBytes(dir);
    EXPECT_EQ(on_disk, slots * numel * (4 * 64 + 136) / 64) << "atomic " << atomic;
    EXPECT_EQ(on_disk * 8, slots * numel * 49);  // 6.125 bytes per param
    const EngineStats s = o.engine->Stats();
    EXPECT_EQ(s.nvme_bytes, on_disk);
    EstimateParam ep;
    ep.numel = numel;
    auto est = EstimateMemory({ep}, nv, {1, 1, false});
    ASSERT_TRUE(est.ok()) << est.status();
    EXPECT_EQ(est->nvme_bytes, on_disk);
    EXPECT_EQ(est->optimizer_bytes, s.optimizer_bytes);  // host staging buffers
  }
}

// The MLP at 3 ranks: chunks of 128 elements and shorter group tails, each
// array region padded: this rank's files on disk (while it trains) against
// the per-chunk formula, and the estimator's NVMe and staging bytes within
// 2% of zero_stats.
TEST(Q8NvmeMemory, PaddedChunksMatchFormulaAndEstimate) {
  for (int stage : {1, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::string dir = FreshDir("q8_mlp_bytes");
    const Config c = OnNvme(Q8Config(stage, DType::kBF16), dir);
    std::mutex mu;
    std::map<int, std::pair<int64_t, int64_t>> disk_and_formula;  // by rank
    MlpSpec spec;
    spec.steps = 1;
    spec.hook = [&](Engine* e, int, int index) {
      if (index != -1) return absl::OkStatus();
      std::vector<int64_t> lens;
      for (const LayoutGroup& g : e->layout().groups()) lens.push_back(g.shard);
      const int rank = e->Stats().rank;
      const int64_t disk = FileBytes(dir, rank);
      std::lock_guard<std::mutex> l(mu);
      disk_and_formula[rank] = {disk, FormulaBytes(lens, c.sub_group_size, 1)};
      return absl::OkStatus();
    };
    std::vector<MlpResult> all = TrainAll(c, 3, spec);
    ASSERT_EQ(disk_and_formula.size(), 3u);
    for (const auto& [rank, df] : disk_and_formula) {
      EXPECT_GT(df.first, 0) << "rank " << rank;
      EXPECT_EQ(df.first, df.second) << "rank " << rank;
    }
    const EngineStats& s = all[0].stats;
    EXPECT_EQ(s.nvme_bytes - s.nvme_grad_bytes, disk_and_formula[0].first);
    auto est = EstimateMemory(MlpEstimateParams(all[0]), c, {3, 1, false});
    ASSERT_TRUE(est.ok()) << est.status();
    auto within = [](int64_t est, int64_t got) {
      return std::abs(static_cast<double>(est - got)) <= 0.02 * static_cast<double>(got);
    };
    EXPECT_TRUE(within(est->nvme_bytes, s.nvme_bytes))
        << "estimate " << est->nvme_bytes << " zero_stats " << s.nvme_bytes;
    EXPECT_TRUE(within(est->optimizer_bytes, s.optimizer_bytes))
        << "estimate " << est->optimizer_bytes << " zero_stats " << s.optimizer_bytes;
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
