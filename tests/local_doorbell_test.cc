// The local doorbell (core/comm/local_doorbell.h) on its own: a waiter is
// woken by a ring from another process well before its timeout, returns at
// its timeout when nobody rings, finds a ring that came before its wait
// (the word moved: nothing lost), and a segment that cannot be mapped is a
// status the caller falls back on (to timed sleeps).
#include "core/comm/local_doorbell.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "core/comm/mpi_short_sleep.h"
#include "gtest/gtest.h"

namespace zero {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

std::string Name(const char* what) {
  static int n = 0;
  return "/zero-doorbell-test-" + std::to_string(getpid()) + "-" + what + "-" +
         std::to_string(n++);
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// A bell made and unlinked at once, as MakeMpiLocalDoorbell does once
// every rank has mapped it.
TEST(LocalDoorbell, RingFromAnotherProcessWakesTheWaiterBeforeItsTimeout) {
  const std::string name = Name("wake");
  auto bell = LocalDoorbell::Create(name, 2, 0);
  ASSERT_TRUE(bell.ok()) << bell.status();
  const uint32_t seen = (*bell)->Seen();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto peer = LocalDoorbell::Open(name, 2, 1);
    if (!peer.ok()) _exit(2);
    std::this_thread::sleep_for(milliseconds(100));
    (*peer)->Ring(0);
    _exit(0);
  }
  const auto t0 = Clock::now();
  bool rung = false;
  // A spurious wake (a signal) returns early without a ring: wait again.
  while (!rung && Seconds(t0) < 10) rung = (*bell)->Wait(seen, std::chrono::seconds(10));
  const double waited = Seconds(t0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the ringing process failed";
  EXPECT_TRUE(LocalDoorbell::Unlink(name).ok());
  EXPECT_TRUE(rung);
  EXPECT_EQ((*bell)->Count(0), seen + 1);
  // Rung after ~0.1 s; a timeout would have been 10 s.
  EXPECT_GE(waited, 0.09);
  EXPECT_LT(waited, 5.0) << "woke at (or near) its timeout, not at the ring";
}

TEST(LocalDoorbell, WaiterWithNoRingReturnsAtItsTimeout) {
  const std::string name = Name("timeout");
  auto bell = LocalDoorbell::Create(name, 3, 2);
  ASSERT_TRUE(bell.ok()) << bell.status();
  ASSERT_TRUE(LocalDoorbell::Unlink(name).ok());
  const uint32_t seen = (*bell)->Seen();
  const auto t0 = Clock::now();
  bool rung = false;
  while (!rung && Seconds(t0) < 0.05) {
    rung = (*bell)->Wait(seen, microseconds(50000) - std::chrono::duration_cast<microseconds>(
                                                         Clock::now() - t0));
  }
  const double waited = Seconds(t0);
  EXPECT_FALSE(rung);
  EXPECT_GE(waited, 0.05);
  EXPECT_LT(waited, 2.0);
  // The same through the waits' sleep: no longer than the sleep asked.
  const auto t1 = Clock::now();
  EXPECT_FALSE(MpiShortSleepOrRing(bell->get(), seen, microseconds(2000)));
  EXPECT_GE(Seconds(t1), 0.0019);
}

TEST(LocalDoorbell, RingWithNobodyWaitingIsNotLost) {
  const std::string name = Name("early");
  auto a = LocalDoorbell::Create(name, 2, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = LocalDoorbell::Open(name, 2, 1);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(LocalDoorbell::Unlink(name).ok());
  const uint32_t seen = (*b)->Seen();  // read before the test that failed
  (*a)->RingOthers();                  // the peer moved meanwhile
  EXPECT_EQ((*a)->Count(1), seen + 1);
  EXPECT_EQ((*a)->Count(0), 0u) << "RingOthers rang the ringer";
  const auto t0 = Clock::now();
  EXPECT_TRUE((*b)->Wait(seen, std::chrono::seconds(10)));
  EXPECT_LT(Seconds(t0), 1.0) << "a ring before the wait was lost";
  // A thread asleep on its word is woken by a ring from a thread too.
  const uint32_t now = (*b)->Seen();
  std::atomic<bool> woke{false};
  std::thread waiter([&] { woke = (*b)->Wait(now, std::chrono::seconds(10)); });
  std::this_thread::sleep_for(milliseconds(50));
  const auto t1 = Clock::now();
  (*a)->Ring(1);
  waiter.join();
  EXPECT_TRUE(woke.load());
  EXPECT_LT(Seconds(t1), 5.0);
}

// What MakeMpiLocalDoorbell falls back on (timed sleeps) when the segment
// cannot be made or mapped: a status, never a crash; and the waits' sleep
// with no bell is the timed sleep of before.
TEST(LocalDoorbell, SegmentThatCannotBeMappedIsAStatus) {
  const std::string name = Name("missing");
  auto missing = LocalDoorbell::Open(name, 2, 1);
  EXPECT_FALSE(missing.ok());
  const std::string taken = Name("taken");
  auto first = LocalDoorbell::Create(taken, 2, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = LocalDoorbell::Create(taken, 2, 0);  // O_EXCL: a name in use is refused
  EXPECT_FALSE(second.ok());
  auto too_small = LocalDoorbell::Open(taken, 64, 1);  // more ranks than its words
  EXPECT_FALSE(too_small.ok());
  EXPECT_TRUE(LocalDoorbell::Unlink(taken).ok());
  EXPECT_FALSE(LocalDoorbell::Unlink(taken).ok());
  EXPECT_EQ(LocalDoorbell::Create(Name("bad"), 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LocalDoorbell::Create("no-leading-slash/x", 2, 0).ok(), false);
  const auto t0 = Clock::now();
  EXPECT_FALSE(MpiShortSleepOrRing(nullptr, 0, microseconds(3000)));
  EXPECT_GE(Seconds(t0), 0.0029);
}

}  // namespace
}  // namespace zero
