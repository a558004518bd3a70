// The NVMe tier: state round-trips through the files over io_uring and the
// blocking fallback, with and without O_DIRECT, in one slot or two
// (atomic_step); with two a failed step leaves the last committed state
// whole, with one it makes the tier refuse every later call; files are
// preallocated and a full disk is refused at Create with the bytes needed
// and free; a killed run's leftover files are removed by the next claim,
// a live one's kept; bad paths and files changed underneath are clear
// errors; the files go away with the tier; arrays of another width
// (packed 8-bit moments) round-trip at their own sizes.
#include "core/offload/nvme_tier.h"
#include "core/offload/param_file.h"
#include "core/offload/swap_dir.h"
#include "core/common/io_fault.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
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

NvmeTierOptions Options(const std::string& dir, bool uring, bool direct, int buffers,
                        bool atomic = false) {
  NvmeTierOptions o;
  o.dir = dir;
  o.atomic_step = atomic;
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
  for (bool atomic : {false, true}) {
  std::vector<std::string> paths;
  {
    auto t = NvmeTier::Create(Options(dir, uring, direct, buffers, atomic), kGroups);
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
    // Disk: every element's 3 arrays once per slot, plus the 4 KiB padding
    // of each chunk's regions.
    const int64_t state = 12 * (10000 + 3 + 70001);
    EXPECT_GE((*t)->stats().file_bytes, (atomic ? 2 : 1) * state);
    EXPECT_LE((*t)->stats().file_bytes, (atomic ? 2 : 1) * (state + 30 * 3 * 4096));
    struct stat fs;
    ASSERT_EQ(::stat(paths[2].c_str(), &fs), 0);
    EXPECT_GE(fs.st_blocks * 512, fs.st_size) << "preallocated, no holes";
  }
  for (const auto& p : paths) EXPECT_FALSE(Exists(p)) << p << " left behind";
  EXPECT_TRUE(FilesIn(dir).empty()) << "lock file left behind";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, NvmeTierTest,
    ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Values(1, 2, 4)),
    [](const auto& i) {
      return std::string(std::get<0>(i.param) ? "uring" : "pread") +
             (std::get<1>(i.param) ? "_direct" : "_buffered") + "_buffers" +
             std::to_string(std::get<2>(i.param));
    });

// Arrays of another width (8-bit moments: 136 bytes per 64-element
// block): each chunk region is array_bytes padded to 4 KiB, the pipeline
// hands each array at its region, ReadBytes/WriteBytes move whole blocks
// from a block start across chunks, and the files are sized from
// array_bytes.
int64_t PackedBytes(int a, int64_t n) { return a == 0 ? 4 * n : (n + 63) / 64 * 136; }

// Byte `off` of group g's packed array after `steps` updates.
uint8_t PackedByte(int g, int64_t off, int steps) {
  return static_cast<uint8_t>(g * 131 + off * 7 + steps);
}

TEST(NvmeTierPacked, ArraysOfAnotherWidthRoundTrip) {
  const std::vector<int64_t> groups = {1280, 64, 1984};
  for (bool uring : {true, false}) {
    NvmeTierOptions o = Options(TempDir(uring ? "packed_uring" : "packed_pread"), uring, true, 3);
    o.num_arrays = 2;
    o.chunk_elems = 640;  // block starts
    o.array_bytes = PackedBytes;
    auto t = NvmeTier::Create(o, groups);
    ASSERT_TRUE(t.ok()) << t.status();
    int64_t formula = 0;
    for (int64_t len : groups) {
      for (int64_t b = 0; b < len; b += 640) {
        const int64_t n = std::min<int64_t>(640, len - b);
        formula += (4 * n + 4095) / 4096 * 4096 + (PackedBytes(1, n) + 4095) / 4096 * 4096;
      }
    }
    EXPECT_EQ((*t)->stats().file_bytes, formula);
    auto fill = [](int steps) {
      return [steps](const NvmeTier::Chunk& c, float* const* arr) -> absl::Status {
        const int64_t region = (4 * c.len + 4095) / 4096 * 4096;
        if (reinterpret_cast<char*>(arr[1]) - reinterpret_cast<char*>(arr[0]) != region) {
          return absl::InternalError("packed array not at its region");
        }
        uint8_t* packed = reinterpret_cast<uint8_t*>(arr[1]);
        const int64_t at = PackedBytes(1, c.begin);
        for (int64_t i = 0; i < c.len; ++i) {
          if (steps > 0 && arr[0][i] != Expected(c.group, 0, c.begin + i, steps - 1)) {
            return absl::InternalError("master read back wrong");
          }
          arr[0][i] = Expected(c.group, 0, c.begin + i, steps);
        }
        for (int64_t k = 0; k < PackedBytes(1, c.len); ++k) {
          if (steps > 0 && packed[k] != PackedByte(c.group, at + k, steps - 1)) {
            return absl::InternalError("packed byte read back wrong");
          }
          packed[k] = PackedByte(c.group, at + k, steps);
        }
        return absl::OkStatus();
      };
    };
    ASSERT_TRUE((*t)->Initialize(fill(0)).ok());
    for (int s = 1; s <= 2; ++s) {
      absl::Status st = (*t)->Update(fill(s), [](bool ok) -> absl::StatusOr<bool> { return ok; });
      ASSERT_TRUE(st.ok()) << st;
    }
    // Blocks 9..20 of group 2: across its first chunk's end.
    std::vector<uint8_t> bytes(PackedBytes(1, 12 * 64));
    ASSERT_TRUE((*t)->ReadBytes(2, 1, 9 * 64, 12 * 64, bytes.data()).ok());
    for (size_t k = 0; k < bytes.size(); ++k) {
      ASSERT_EQ(bytes[k], PackedByte(2, 9 * 136 + k, 2)) << k;
    }
    for (uint8_t& b : bytes) b ^= 0x5a;
    ASSERT_TRUE((*t)->WriteBytes(2, 1, 9 * 64, 12 * 64, bytes.data()).ok());
    std::vector<uint8_t> all(PackedBytes(1, groups[2]));
    ASSERT_TRUE((*t)->ReadBytes(2, 1, 0, groups[2], all.data()).ok());
    for (size_t k = 0; k < all.size(); ++k) {
      const bool written = k >= 9 * 136 && k < 21 * 136;
      ASSERT_EQ(all[k], PackedByte(2, k, 2) ^ (written ? 0x5a : 0)) << k;
    }
    std::vector<float> master(groups[2]);
    ASSERT_TRUE((*t)->ReadRange(2, 0, 0, groups[2], master.data()).ok());
    for (int64_t i = 0; i < groups[2]; ++i) ASSERT_EQ(master[i], Expected(2, 0, i, 2)) << i;
  }
}

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
    auto t = NvmeTier::Create(Options(TempDir("efbig"), uring, true, 3, /*atomic=*/true), {20000});
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
  auto t = NvmeTier::Create(Options(TempDir("agree"), true, true, 4, /*atomic=*/true), kGroups);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(Init(t->get()).ok());
  ASSERT_TRUE(Step(t->get()).ok());
  absl::Status s = Step(t->get(), /*agree=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  ExpectState(t->get(), 1);
}

// One slot (the default): a write that fails mid-step (an injected EIO or
// ENOSPC, io_uring and blocking) fails the step naming the file, and the
// tier then refuses every access, pointing at the last checkpoint; so does
// another rank's failure.
TEST(NvmeTierErrors, OneSlotFailedStepRefusesEverythingAfter) {
  for (bool uring : {true, false}) {
    for (const char* fault : {"write:3:EIO", "write:2:ENOSPC", "read:4:EIO", "agree"}) {
      auto t = NvmeTier::Create(Options(TempDir("oneslot"), uring, true, 3), kGroups);
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_TRUE(Init(t->get()).ok());
      ASSERT_TRUE(Step(t->get()).ok());
      const bool agree = std::string(fault) == "agree";
      const int64_t before = io::IoFaultsInjected();
      if (!agree) {
        ASSERT_TRUE(io::SetIoFaults(fault).ok());
      }
      absl::Status s = Step(t->get(), /*agree=*/!agree);
      ASSERT_TRUE(io::SetIoFaults("").ok());
      ASSERT_FALSE(s.ok()) << fault;
      if (agree) {
        EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
      } else {
        EXPECT_EQ(io::IoFaultsInjected(), before + 1) << fault;
        EXPECT_EQ(s.code(), std::string(fault).find("ENOSPC") != std::string::npos
                                ? absl::StatusCode::kResourceExhausted
                                : absl::StatusCode::kUnavailable) << s;
        EXPECT_NE(s.message().find((*t)->paths()[0]), std::string::npos) << s;
      }
      EXPECT_TRUE((*t)->damaged());
      std::vector<float> out(3);
      absl::Status r = (*t)->ReadRange(0, 0, 0, 3, out.data());
      EXPECT_EQ(r.code(), absl::StatusCode::kDataLoss) << r;
      EXPECT_NE(r.message().find("load the last checkpoint"), std::string::npos) << r;
      EXPECT_FALSE(Step(t->get()).ok());
    }
  }
}

// Short transfers (half a request, 4 KiB-aligned under O_DIRECT) are
// finished by the IO engine: nothing is lost.
TEST(NvmeTierErrors, ShortReadsAndWritesAreCompleted) {
  for (bool uring : {true, false}) {
    auto t = NvmeTier::Create(Options(TempDir("short"), uring, true, 3), kGroups);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE(Init(t->get()).ok());
    const int64_t before = io::IoFaultsInjected();
    ASSERT_TRUE(io::SetIoFaults("read:2+:short;write:3+:short").ok());
    for (int s = 1; s <= 2; ++s) ASSERT_TRUE(Step(t->get()).ok());
    ASSERT_TRUE(io::SetIoFaults("").ok());
    EXPECT_GT(io::IoFaultsInjected(), before + 10);
    ExpectState(t->get(), 2);
  }
}

// Preallocation: a disk without room fails Create with the bytes needed and
// the bytes free (no file left); an injected ENOSPC from fallocate too.
TEST(NvmeTierErrors, FullDiskFailsAtCreateWithBytesNeededAndFree) {
  const std::string dir = TempDir("full");
  const int64_t avail = SwapDir::FreeBytes(dir);
  ASSERT_GT(avail, 0);
  // One group as large as the free space and more.
  auto t = NvmeTier::Create(Options(dir, true, true, 2), {avail / 12 + 1000000});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
  EXPECT_NE(t.status().message().find("needs"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("bytes are free"), std::string::npos) << t.status();
  EXPECT_TRUE(FilesIn(dir).empty());
  ASSERT_TRUE(io::SetIoFaults("alloc:2:ENOSPC").ok());
  t = NvmeTier::Create(Options(dir, true, true, 2), kGroups);
  ASSERT_TRUE(io::SetIoFaults("").ok());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
  EXPECT_NE(t.status().message().find("cannot reserve"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("bytes free"), std::string::npos) << t.status();
  EXPECT_TRUE(FilesIn(dir).empty()) << FilesIn(dir).size();
}

// A run killed with its tier alive leaves its files and an unheld lock; the
// next claim on the directory removes them and says so. A live tier's files
// (this process, another claim) are left alone.
TEST(SwapDirTest, LeftoversOfAKilledRunAreRemovedLiveOnesKept) {
  const std::string dir = TempDir("leftover");
  const pid_t child = ::fork();
  if (child == 0) {
    auto t = NvmeTier::Create(Options(dir, false, true, 2), kGroups);
    if (!t.ok()) ::_exit(2);
    ::kill(::getpid(), SIGKILL);  // dies holding its files
    ::_exit(3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  const size_t left = FilesIn(dir).size();
  EXPECT_EQ(left, kGroups.size() + 1) << "3 state files and the lock";
  auto live = NvmeTier::Create(Options(dir, true, true, 2), {100});
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_NE((*live)->stats().note.find("removed 3 leftover swap file(s)"), std::string::npos)
      << (*live)->stats().note;
  EXPECT_EQ(FilesIn(dir).size(), 2u) << "only the live tier's file and lock";
  auto second = NvmeTier::Create(Options(dir, true, true, 2), {100});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->stats().note.find("removed"), std::string::npos) << (*second)->stats().note;
  EXPECT_EQ(FilesIn(dir).size(), 4u);
  live->reset();
  second->reset();
  EXPECT_TRUE(FilesIn(dir).empty());
}

// Unaligned slices through O_DIRECT bounce buffers (and buffered IO): writes
// keep the bytes around them, reads see the committed slot only.
TEST(ParamFileTest, UnalignedSlicesRoundTripAndCommitFlips) {
  for (bool direct : {true, false}) {
    const int64_t n = 3 * 4096 + 123;
    auto f = ParamFile::Create(TempDir("shard"), direct ? "d.swp" : "b.swp", n, direct,
                               /*slots=*/2);
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

// Transfers larger than one bounce (8 MiB) go through it piece by piece:
// unaligned ranges that start, end and cross inside those pieces keep every
// byte around them, against a reference copy; so do reads into and writes
// from buffers with the offset's alignment (straight, the edges bounced).
TEST(ParamFileTest, LargeUnalignedTransfersCrossBouncePieces) {
  const int64_t n = (17 << 20) + 4096 * 3 + 77;
  auto f = ParamFile::Create(TempDir("shard"), "big.swp", n, /*try_direct=*/true, 1);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<char> ref(n), out(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<char>(i * 31 + (i >> 12));
  ASSERT_TRUE((*f)->WriteCommitted(0, n, ref.data()).ok());
  const int64_t mib = 1 << 20;
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {3, n - 3}, {8 * mib - 5, 10}, {4096, 8 * mib}, {8 * mib + 1, 8 * mib + 4094},
      {16 * mib - 100, n - 16 * mib + 100}, {8 * mib - 4096, 4096}, {123, 45}};
  int k = 0;
  for (const auto& [off, len] : ranges) {
    std::vector<char> in(len);
    for (int64_t i = 0; i < len; ++i) in[i] = static_cast<char>(i * 7 + 11 * ++k);
    ASSERT_TRUE((*f)->Write(off, len, in.data()).ok()) << off << "+" << len;
    std::copy(in.begin(), in.end(), ref.begin() + off);
    ASSERT_TRUE((*f)->Read(0, n, out.data()).ok());
    ASSERT_TRUE(out == ref) << "after writing " << off << "+" << len;
    std::vector<char> part(len);
    ASSERT_TRUE((*f)->Read(off, len, part.data()).ok());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), ref.begin() + off)) << off << "+" << len;
    // A destination with the offset's alignment takes the aligned middle
    // straight from the file (one O_DIRECT read), the edges bounced.
    const int64_t lead = off % 4096;
    std::unique_ptr<char, decltype(&std::free)> al(
        static_cast<char*>(std::aligned_alloc(4096, (lead + len + 4095) / 4096 * 4096 + 4096)),
        &std::free);
    ASSERT_TRUE((*f)->Read(off, len, al.get() + lead).ok());
    EXPECT_TRUE(std::equal(al.get() + lead, al.get() + lead + len, ref.begin() + off))
        << "direct " << off << "+" << len;
    // A source with the offset's alignment is written straight from (the
    // aligned middle in one O_DIRECT write, the edges read-modify-written
    // through the bounce): every byte around the range kept.
    for (int64_t i = 0; i < len; ++i) al.get()[lead + i] = static_cast<char>(i * 5 + 3 * k);
    ASSERT_TRUE((*f)->Write(off, len, al.get() + lead).ok()) << "direct " << off << "+" << len;
    std::copy(al.get() + lead, al.get() + lead + len, ref.begin() + off);
    ASSERT_TRUE((*f)->Read(0, n, out.data()).ok());
    ASSERT_TRUE(out == ref) << "after writing directly " << off << "+" << len;
  }
  std::unique_ptr<char, decltype(&std::free)> whole(
      static_cast<char*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096)), &std::free);
  ASSERT_TRUE((*f)->Read(0, n, whole.get()).ok());
  EXPECT_TRUE(std::equal(whole.get(), whole.get() + n, ref.begin()));
}

}  // namespace
}  // namespace offload
}  // namespace zero
