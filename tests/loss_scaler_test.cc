// DeepSpeed's dynamic loss scaler, step by step, against a table worked out
// by hand from runtime/fp16/loss_scaler.py.
#include <gtest/gtest.h>

#include "core/optim/loss_scaler.h"

namespace zero {
namespace {

struct Row {
  bool overflow;
  double scale_after;
  int hysteresis_after;
};

TEST(LossScalerTest, WindowHysteresisAndHalving) {
  // window 3, hysteresis 2, 2^4 initial, min 1.
  LossScaler s(true, 0, 4, 3, 2, false, 1.0);
  EXPECT_EQ(s.scale(), 16.0);
  const Row rows[] = {
      {false, 16, 2},  // iter 0: (0 - -1) % 3 != 0
      {false, 16, 2},  // iter 1
      {false, 32, 2},  // iter 2: 3 clean steps -> double
      {true, 32, 1},   // iter 3: hysteresis absorbs the first overflow
      {true, 16, 1},   // iter 4: hysteresis spent -> halve
      {false, 16, 1},  // iter 5: window counts from the last overflow
      {false, 16, 1},  // iter 6
      {false, 32, 2},  // iter 7: 3 clean since iter 4 -> double, refill
      {true, 32, 1},   // iter 8
      {false, 32, 1},  // iter 9: no refill without consecutive_hysteresis
      {true, 16, 1},   // iter 10: halve at once
  };
  int i = 0;
  for (const Row& r : rows) {
    ASSERT_TRUE(s.Update(r.overflow).ok());
    EXPECT_EQ(s.scale(), r.scale_after) << "iter " << i;
    EXPECT_EQ(s.state().cur_hysteresis, r.hysteresis_after) << "iter " << i;
    ++i;
  }
}

TEST(LossScalerTest, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScaler s(true, 0, 4, 100, 2, true, 1.0);
  ASSERT_TRUE(s.Update(true).ok());   // hysteresis 2 -> 1
  EXPECT_EQ(s.scale(), 16.0);
  ASSERT_TRUE(s.Update(false).ok());  // refilled to 2
  EXPECT_EQ(s.state().cur_hysteresis, 2);
  ASSERT_TRUE(s.Update(true).ok());   // 2 -> 1 again, no halving
  EXPECT_EQ(s.scale(), 16.0);
}

TEST(LossScalerTest, FloorAtMinAndErrorBelowIt) {
  LossScaler s(true, 0, 2, 1000, 1, false, 2.0);  // 4, min 2, no hysteresis
  ASSERT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.scale(), 2.0);
  absl::Status st = s.Update(true);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("already at minimum"), std::string::npos);
}

TEST(LossScalerTest, StaticScaleNeverMoves) {
  LossScaler s(false, 128.0, 16, 1, 1, false, 1.0);
  for (bool o : {true, false, false, true}) ASSERT_TRUE(s.Update(o).ok());
  EXPECT_EQ(s.scale(), 128.0);
}

}  // namespace
}  // namespace zero
