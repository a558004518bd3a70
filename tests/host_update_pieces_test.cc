// ZeRO-Offload's exact update, its parts apart from the engine: the pieces
// HostStateStore cuts (docs/ARCHITECTURE.md "Offload") and the copy lane
// that runs one direction's copies.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/config/config.h"
#include "core/engine/copy_lane.h"
#include "core/engine/host_state_store.h"
#include "gtest/gtest.h"

namespace zero {
namespace {

// Every owned element in exactly one piece, in group and element order;
// each piece at most the cap the formula gives; every piece but a group's
// last a multiple of 64 long when the cap is; the first and the last
// piece about a quarter of the cap (on multiples of 64).
void ExpectPieces(const Config& c, const std::vector<int64_t>& owned) {
  int64_t total = 0;
  for (int64_t n : owned) total += n;
  const int64_t cap = std::min<int64_t>(
      {c.sub_group_size, int64_t{1} << 22, std::max<int64_t>(65536, (total + 7) / 8)});
  const std::vector<HostPiece> pieces = HostUpdatePieces(c, owned);
  size_t k = 0;
  int64_t largest = 0;
  for (size_t g = 0; g < owned.size(); ++g) {
    int64_t at = 0;
    for (; k < pieces.size() && pieces[k].g == static_cast<int>(g); ++k) {
      EXPECT_EQ(pieces[k].begin, at) << "group " << g << " piece " << k;
      EXPECT_GT(pieces[k].len, 0);
      EXPECT_LE(pieces[k].len, cap);
      if (c.sub_group_size % 64 == 0 && pieces[k].begin + pieces[k].len < owned[g]) {
        EXPECT_EQ(pieces[k].len % 64, 0) << "group " << g << " piece " << k;
      }
      at += pieces[k].len;
      largest = std::max(largest, pieces[k].len);
    }
    EXPECT_EQ(at, owned[g]) << "group " << g;
  }
  EXPECT_EQ(k, pieces.size());
  EXPECT_EQ(HostUpdatePieceElems(c, owned), largest);
  if (pieces.size() >= 4 && cap >= 1024) {
    EXPECT_LE(pieces.front().len, cap / 4 + 64) << "the pipeline's fill";
    EXPECT_LE(pieces.back().len, cap / 4 + 128) << "its drain";
  }
}

TEST(HostUpdatePieces, CoverTheOwnedRangesInOrder) {
  Config c;
  ExpectPieces(c, {32000000});
  ExpectPieces(c, {8000000, 8000000, 8000000, 8000000});
  ExpectPieces(c, {1000001, 3, 0, 777777});
  ExpectPieces(c, {300});
  ExpectPieces(c, {});
  c.sub_group_size = 37;
  ExpectPieces(c, {300, 1000, 5});
  c.sub_group_size = 640;
  ExpectPieces(c, {100000, 64, 7000});
}

TEST(CopyLane, RunsInOrderAndWaitsForATicket) {
  CopyLane lane;
  std::vector<int> ran;
  std::atomic<int> running{0}, count{0};
  int64_t last = 0;
  for (int i = 0; i < 20; ++i) {
    last = lane.Submit([&, i] {
      EXPECT_EQ(running.fetch_add(1), 0) << "one copy at a time";
      if (i % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ran.push_back(i);
      count.fetch_add(1);
      running.fetch_sub(1);
    });
    EXPECT_EQ(last, i + 1);
  }
  lane.Wait(10);
  EXPECT_GE(count.load(), 10);  // the first ten ran
  lane.Drain();
  ASSERT_EQ(ran.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(ran[i], i);
}

TEST(CopyLane, RunsWhatWasQueuedBeforeItIsDestroyed) {
  int done = 0;
  {
    CopyLane lane;
    for (int i = 0; i < 5; ++i) lane.Submit([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++done;
    });
  }
  EXPECT_EQ(done, 5);
}

}  // namespace
}  // namespace zero
