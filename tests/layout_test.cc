// The flat partition layout: padding, shards, slices of straddling params.
#include <gtest/gtest.h>

#include <numeric>

#include "core/partition/layout.h"

namespace zero {
namespace {

TEST(LayoutTest, PadsToWorldTimesAlignAndSlicesCoverEveryElementOnce) {
  std::vector<LayoutParam> ps = {{0, 100, DType::kF32}, {1, 7, DType::kF32}, {2, 250, DType::kF32}};
  for (int world : {1, 2, 3, 4}) {
    Layout l(ps, world, 1000000000);
    ASSERT_EQ(l.groups().size(), 1u);
    const LayoutGroup& g = l.groups()[0];
    EXPECT_EQ(g.numel, 357);
    EXPECT_EQ(g.padded % (world * kAlignElems), 0);
    EXPECT_LT(g.padded - g.numel, world * kAlignElems);
    EXPECT_EQ(g.shard * world, g.padded);
    for (int i = 0; i < 3; ++i) {
      auto counts = l.Counts(i);
      EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), ps[i].numel);
      int64_t next = 0;  // slices are contiguous, in rank order
      for (int r = 0; r < world; ++r) {
        Slice s = l.SliceOn(i, r);
        if (s.numel == 0) continue;
        EXPECT_EQ(s.param_offset, next);
        EXPECT_EQ(l.place(i).offset + s.param_offset, g.shard * r + s.shard_offset);
        next += s.numel;
      }
    }
  }
}

TEST(LayoutTest, ThreeRanksStraddle) {
  Layout l({{0, 100, DType::kF32}, {1, 100, DType::kF32}}, 3, 1000000000);
  // 200 elements padded to 384: shards of 128. Param 1 spans ranks 0 and 1.
  EXPECT_EQ(l.groups()[0].shard, 128);
  EXPECT_EQ(l.Counts(1), (std::vector<int64_t>{28, 72, 0}));
}

TEST(LayoutTest, SubGroupsAndDtypesSplitGroups) {
  Layout l({{0, 60, DType::kF16}, {1, 60, DType::kF16}, {2, 500, DType::kF16},
            {3, 10, DType::kF32}},
           2, 100);
  ASSERT_EQ(l.groups().size(), 4u);  // 60 | 60 | 500 (alone) | fp32
  EXPECT_EQ(l.place(1).group, 1);
  EXPECT_EQ(l.place(2).group, 2);
  EXPECT_EQ(l.place(3).group, 3);
  EXPECT_EQ(l.total_numel(), 630);
}

}  // namespace
}  // namespace zero
