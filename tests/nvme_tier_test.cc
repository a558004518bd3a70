// The NVMe tier: state round-trips through the files over io_uring and the
// blocking fallback, with and without O_DIRECT; a failed step leaves the last
// committed state whole; bad paths and files changed underneath are clear
// errors; the files go away with the tier.
#include "core/offload/nvme_tier.h"
#include "core/offload/param_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace zero {
namespace offload {
namespace {

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/" + name;
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

bool Exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

NvmeTierOptions Options(const std::string& dir, bool uring, bool direct, int buffers) {
  NvmeTierOptions o;
  o.dir = dir;
  o.tag = "t";
  o.num_arrays = 3;
  o.buffer_count = buffers;
  o.chunk_elems = 4096 + 7;  // chunks not a multiple of the 4 KiB alignment
  o.try_direct = direct;
  o.aio.use_uring = uring;
  o.aio.block_size = 8192;   // several pieces per chunk
  o.aio.queue_depth = 4;
  return o;
}

const std::vector<int64_t> kGroups = {10000, 3, 70001};

// Value of element i of array a of group g after `steps` updates.
float Expected(int g, int a, int64_t i, int steps) {
  return static_cast<float>(g * 1000000 + a * 100000 + i % 99991) + steps * (a + 1);
}

absl::Status Init(NvmeTier* t) {
  return t->Initialize([](const NvmeTier::Chunk& c, float* const* arr) {
    for (int a = 0; a < 3; ++a) {
      for (int64_t i = 0; i < c.len; ++i) arr[a][i] = Expected(c.group, a, c.begin + i, 0);
    }
    return absl::OkStatus();
  });
}

absl::Status Step(NvmeTier* t, bool agree = true) {
  return t->Update(
      [](const NvmeTier::Chunk& c, float* const* arr) {
        for (int a = 0; a < 3; ++a) {
          for (int64_t i = 0; i < c.len; ++i) arr[a][i] += a + 1;
        }
        return absl::OkStatus();
      },
      [agree](bool ok) -> absl::StatusOr<bool> { return ok && agree; });
}

void ExpectState(NvmeTier* t, int steps) {
  for (int g = 0; g < static_cast<int>(kGroups.size()); ++g) {
    for (int a = 0; a < 3; ++a) {
      std::vector<float> out(kGroups[g]);
      ASSERT_TRUE(t->ReadRange(g, a, 0, kGroups[g], out.data()).ok());
      for (int64_t i = 0; i < kGroups[g]; ++i) {
        ASSERT_EQ(out[i], Expected(g, a, i, steps)) << "g" << g << " a" << a << " i" << i;
      }
    }
  }
}

class NvmeTierTest : public ::testing::TestWithParam<std::tuple<bool, bool, int>> {};

TEST_P(NvmeTierTest, StateRoundTripsThroughTheFiles) {
  const auto [uring, direct, buffers] = GetParam();
  const std::string dir = TempDir("roundtrip");
  std::vector<std::string> paths;
  {
    auto t = NvmeTier::Create(Options(dir, uring, direct, buffers), kGroups);
    ASSERT_TRUE(t.ok()) << t.status();
    NvmeTierStats st = (*t)->stats();
    std::printf("uring=%d direct=%d note='%s'\n", st.uring, st.direct_io, st.note.c_str());
    if (!direct) {
      EXPECT_FALSE(st.direct_io);
    }
    // max(B, 2) chunks of 3 regions of 16 KiB + 4 KiB: one buffer cannot pipeline.
    EXPECT_LE(st.host_bytes, std::max(buffers, 2) * 3 * 20480);
    ASSERT_TRUE(Init(t->get()).ok());
    for (int s = 1; s <= 3; ++s) ASSERT_TRUE(Step(t->get()).ok());
    ExpectState(t->get(), 3);
    paths = (*t)->paths();
    ASSERT_EQ(paths.size(), 3u);
    for (const auto& p : paths) EXPECT_TRUE(Exists(p)) << p;
    EXPECT_GT((*t)->stats().bytes_written, 3 * 4 * (10000 + 3 + 70001) * 3);
  }
  for (const auto& p : paths) EXPECT_FALSE(Exists(p)) << p << " left behind";
}

INSTANTIATE_TEST_SUITE_P(
    Backends, NvmeTierTest,
    ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Values(1, 2, 4)),
    [](const auto& i) {
      return std::string(std::get<0>(i.param) ? "uring" : "pread") +
             (std::get<1>(i.param) ? "_direct" : "_buffered") + "_buffers" +
             std::to_string(std::get<2>(i.param));
    });

TEST(NvmeTierErrors, MissingPathIsNotFound) {
  auto t = NvmeTier::Create(Options(TempDir("x") + "/no/such/dir", true, true, 4), kGroups);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("does not exist"), std::string::npos) << t.status();
}

TEST(NvmeTierErrors, PathThatIsAFileIsRejected) {
  const std::string f = TempDir("x") + "/plain_file";
  std::ofstream(f) << "x";
  auto t = NvmeTier::Create(Options(f, true, true, 4), kGroups);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not a directory"), std::string::npos) << t.status();
}

TEST(NvmeTierErrors, UnwritablePathIsPermissionDenied) {
  // /sys refuses new files even to root; a 0500 directory refuses others.
  std::string dir = "/sys";
  if (::geteuid() != 0) {
    dir = TempDir("readonly");
    ::chmod(dir.c_str(), 0500);
  }
  auto t = NvmeTier::Create(Options(dir, true, true, 4), kGroups);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kPermissionDenied) << t.status();
  EXPECT_NE(t.status().message().find("cannot create"), std::string::npos) << t.status();
}

TEST(NvmeTierErrors, FileTruncatedBetweenStepsIsDataLoss) {
  for (bool uring : {true, false}) {
    auto t = NvmeTier::Create(Options(TempDir("trunc"), uring, true, 4), kGroups);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE(Init(t->get()).ok());
    ASSERT_TRUE(Step(t->get()).ok());
    ASSERT_EQ(::truncate((*t)->paths()[2].c_str(), 4096), 0);
    absl::Status s = Step(t->get());
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
    EXPECT_NE(s.message().find((*t)->paths()[2]), std::string::npos) << s;
  }
}

// RLIMIT_FSIZE makes every write beyond the first slot fail with EFBIG, as a
// full disk would: the step fails and the committed state stays the old one.
TEST(NvmeTierErrors, FailedWriteLeavesTheStepNotApplied) {
  for (bool uring : {true, false}) {
    auto t = NvmeTier::Create(Options(TempDir("efbig"), uring, true, 3), {20000});
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE((*t)->Initialize([](const NvmeTier::Chunk& c, float* const* arr) {
      for (int64_t i = 0; i < c.len; ++i) arr[0][i] = static_cast<float>(c.begin + i);
      return absl::OkStatus();
    }).ok());
    auto add = [](const NvmeTier::Chunk& c, float* const* arr) {
      for (int64_t i = 0; i < c.len; ++i) arr[0][i] += 1.0f;
      return absl::OkStatus();
    };
    auto yes = [](bool ok) -> absl::StatusOr<bool> { return ok; };
    ASSERT_TRUE((*t)->Update(add, yes).ok());  // now slot 1 is committed
    // Writes now go to slot 0... make the next-but-one fail: first move to slot 0.
    ASSERT_TRUE((*t)->Update(add, yes).ok());  // slot 0 committed, next writes slot 1
    const int64_t slot = (*t)->stats().file_bytes / 2;
    struct rlimit old;
    ::getrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = static_cast<rlim_t>(slot + 4096);  // first piece fits, the rest not
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
    absl::Status s = (*t)->Update(add, yes);
    ::setrlimit(RLIMIT_FSIZE, &old);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find((*t)->paths()[0]), std::string::npos) << s;
    std::vector<float> out(20000);
    ASSERT_TRUE((*t)->ReadRange(0, 0, 0, 20000, out.data()).ok());
    for (int64_t i = 0; i < 20000; ++i) ASSERT_EQ(out[i], i + 2.0f) << i;
    // The disk has room again: training goes on from the committed state.
    ASSERT_TRUE((*t)->Update(add, yes).ok());
    ASSERT_TRUE((*t)->ReadRange(0, 0, 0, 20000, out.data()).ok());
    for (int64_t i = 0; i < 20000; ++i) ASSERT_EQ(out[i], i + 3.0f) << i;
  }
}

TEST(NvmeTierErrors, AnotherRanksFailureLeavesTheStepNotApplied) {
  auto t = NvmeTier::Create(Options(TempDir("agree"), true, true, 4), kGroups);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(Init(t->get()).ok());
  ASSERT_TRUE(Step(t->get()).ok());
  absl::Status s = Step(t->get(), /*agree=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  ExpectState(t->get(), 1);
}

// Unaligned slices through O_DIRECT bounce buffers (and buffered IO): writes
// keep the bytes around them, reads see the committed slot only.
TEST(ParamFileTest, UnalignedSlicesRoundTripAndCommitFlips) {
  for (bool direct : {true, false}) {
    const int64_t n = 3 * 4096 + 123;
    auto f = ParamFile::Create(TempDir("shard"), direct ? "d.swp" : "b.swp", n, direct);
    ASSERT_TRUE(f.ok()) << f.status();
    std::vector<char> init(n), out(n);
    for (int64_t i = 0; i < n; ++i) init[i] = static_cast<char>(i * 7);
    ASSERT_TRUE((*f)->WriteCommitted(0, n, init.data()).ok());
    // Next slot written in odd pieces, as a step writes sub-groups.
    std::vector<char> next(n);
    for (int64_t i = 0; i < n; ++i) next[i] = static_cast<char>(i * 13 + 1);
    for (int64_t a = 0; a < n; a += 1001) {
      const int64_t len = std::min<int64_t>(1001, n - a);
      ASSERT_TRUE((*f)->Write(a, len, next.data() + a).ok());
    }
    ASSERT_TRUE((*f)->Read(0, n, out.data()).ok());
    EXPECT_EQ(out, init) << "uncommitted writes visible";
    (*f)->Commit();
    ASSERT_TRUE((*f)->Read(5000, 333, out.data()).ok());
    EXPECT_EQ(std::vector<char>(out.begin(), out.begin() + 333),
              std::vector<char>(next.begin() + 5000, next.begin() + 5333));
    ASSERT_TRUE((*f)->Read(0, n, out.data()).ok());
    EXPECT_EQ(out, next);
    const std::string path = (*f)->path();
    ASSERT_EQ(::truncate(path.c_str(), 100), 0);
    absl::Status s = (*f)->Read(0, 10, out.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    f->reset();
    EXPECT_FALSE(Exists(path));
  }
}

}  // namespace
}  // namespace offload
}  // namespace zero
