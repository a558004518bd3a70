// NVMe time (wall_clock_breakdown): the spans Aio reports to the
// recorder against the test's own clock. Reads/writes in flight lie inside
// the caller's submit..wait window; a Wait() right after submitting is
// exposed for about all of the IO, one after longer compute for none of it;
// the either-direction span lies between the larger one and their sum.
// Also Wait() while other threads submit (ops_ rehashes under a waiter).
#include "core/offload/aio.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/profile/recorder.h"

namespace zero {
namespace offload {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void Spin(double ms) {
  const auto end = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(ms * 1000));
  volatile double x = 1;
  while (Clock::now() < end) x = x * 1.0000001 + 1e-9;
}

std::string TempFile(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base ? base : "/tmp") + "/" + name;
}

// The recorder's phase totals since the last call.
StepBreakdown Take(Recorder* r) {
  r->OnStepEnter();
  r->OnStepExit(true, 1, 0, 0);
  return r->last();
}

class AioTimesTest : public ::testing::TestWithParam<bool> {};

TEST_P(AioTimesTest, SpansAgainstTheCallersClock) {
  Recorder rec(0, true, {});
  AioOptions o;
  o.use_uring = GetParam();
  o.queue_depth = 4;
  o.block_size = 1 << 20;
  o.recorder = &rec;
  std::unique_ptr<Aio> aio = Aio::Create(o);
  const std::string path = TempFile(GetParam() ? "aio_times_uring" : "aio_times_blocking");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  const size_t kBytes = 32 << 20;
  std::vector<char> buf(kBytes, 7), back(kBytes);

  // Waited for at once: exposed for about all of it.
  (void)Take(&rec);
  auto t0 = Clock::now();
  const Aio::Ticket tw0 = aio->Write(fd, buf.data(), kBytes, 0, path);
  const double before_wait = Ms(Clock::now() - t0);  // the IO not waited for (yet)
  ASSERT_TRUE(aio->Wait(tw0).ok());
  const double wall_now = Ms(Clock::now() - t0);
  StepBreakdown b = Take(&rec);
  const double w = b.at(Phase::kNvmeWrite);
  EXPECT_GT(w, 0);
  EXPECT_LE(w, wall_now + 0.01);
  EXPECT_EQ(b.at(Phase::kNvmeRead), 0);
  EXPECT_DOUBLE_EQ(b.at(Phase::kNvmeBusy), w);  // only writes
  EXPECT_LE(b.at(Phase::kNvmeExposed), wall_now + 0.01);
  // All of the write but what ran before Wait() (slack: the machine is shared).
  EXPECT_GE(b.at(Phase::kNvmeExposed), 0.9 * (w - before_wait) - 1.0) << "write " << w << " ms";
  EXPECT_LE(b.nvme_hidden_ms(), 1.1 * before_wait + 0.1 * w + 1.0);
  EXPECT_LE(b.at(Phase::kNvmeExposed), w + 1e-6);

  // Waited for after compute several times longer than the IO: hidden.
  const double compute = std::max(50.0, 5 * wall_now);
  t0 = Clock::now();
  const Aio::Ticket t = aio->Read(fd, back.data(), kBytes, 0, path);
  Spin(compute);
  const auto w0 = Clock::now();
  ASSERT_TRUE(aio->Wait(t).ok());
  const double wait_ms = Ms(Clock::now() - w0), wall_later = Ms(Clock::now() - t0);
  b = Take(&rec);
  const double r = b.at(Phase::kNvmeRead);
  EXPECT_GT(r, 0);
  EXPECT_LE(r, wall_later + 0.01);
  EXPECT_EQ(b.at(Phase::kNvmeWrite), 0);
  EXPECT_LE(b.at(Phase::kNvmeExposed), wait_ms + 0.01);
  if (r < compute / 2) {  // the IO finished during the compute: nothing waited
    EXPECT_EQ(b.at(Phase::kNvmeExposed), 0);
    EXPECT_DOUBLE_EQ(b.nvme_hidden_ms(), r);
  }
  EXPECT_EQ(back, buf);

  // Both directions at once: the union lies between the larger and the sum.
  const Aio::Ticket tw = aio->Write(fd, buf.data(), kBytes, kBytes, path);
  const Aio::Ticket tr = aio->Read(fd, back.data(), kBytes, 0, path);
  ASSERT_TRUE(aio->Wait(tr).ok());
  ASSERT_TRUE(aio->Wait(tw).ok());
  b = Take(&rec);
  const double busy = b.at(Phase::kNvmeBusy);
  EXPECT_GE(busy + 1e-6, std::max(b.at(Phase::kNvmeRead), b.at(Phase::kNvmeWrite)));
  EXPECT_LE(busy, b.at(Phase::kNvmeRead) + b.at(Phase::kNvmeWrite) + 1e-6);
  ::close(fd);
  ::unlink(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Backends, AioTimesTest, ::testing::Values(true, false),
                         [](const auto& i) { return i.param ? "uring" : "blocking"; });

// Threads submitting while others wait: each wait returns its own ticket's
// result. (Wait() used to keep an ops_ iterator across its sleep, which a
// rehash by another thread's Submit() invalidates per the standard; libstdc++
// keeps nodes in place, so this does not catch that one there.)
TEST(AioWaitTest, ConcurrentSubmitAndWait) {
  for (bool uring : {true, false}) {
    AioOptions o;
    o.use_uring = uring;
    o.block_size = 4096;
    std::unique_ptr<Aio> aio = Aio::Create(o);
    const std::string path = TempFile("aio_concurrent");
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    constexpr int kThreads = 4, kOps = 300;
    std::vector<std::thread> th;
    std::vector<int> bad(kThreads, 0);
    for (int k = 0; k < kThreads; ++k) {
      th.emplace_back([&, k] {
        std::vector<char> w(8192), r(8192);
        for (int i = 0; i < kOps; ++i) {
          std::fill(w.begin(), w.end(), static_cast<char>(k * 31 + i));
          const int64_t off = (static_cast<int64_t>(k) * kOps + i) * 8192;
          if (!aio->Wait(aio->Write(fd, w.data(), w.size(), off, path)).ok()) ++bad[k];
          if (!aio->Wait(aio->Read(fd, r.data(), r.size(), off, path)).ok() || r != w) ++bad[k];
        }
      });
    }
    for (auto& t : th) t.join();
    for (int k = 0; k < kThreads; ++k) EXPECT_EQ(bad[k], 0) << "thread " << k << " uring " << uring;
    ::close(fd);
    ::unlink(path.c_str());
  }
}

}  // namespace
}  // namespace offload
}  // namespace zero
