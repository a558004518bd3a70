// Keys accepted without effect are said once, at startup, by rank 0 only
// (docs/DEEPSPEED_COMPAT.md); a config without them says nothing.
#include <gtest/gtest.h>

#include <string>

#include "core/comm/thread_communicator.h"
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

std::string StartupOutput(const std::string& json, int world) {
  auto c = ParseDsConfig(json);
  EXPECT_TRUE(c.ok()) << c.status();
  ::testing::internal::CaptureStderr();
  RunThreads(world, [&](int, Communicator* comm) {
    auto e = Engine::Create(*c, comm);
    EXPECT_TRUE(e.ok()) << e.status();
  });
  return ::testing::internal::GetCapturedStderr();
}

TEST(ConfigReportTest, NoEffectKeysPrintedOnceOnRankZero) {
  const std::string out = StartupOutput(
      R"({"train_micro_batch_size_per_gpu": 1, "memory_breakdown": true,
          "zero_optimization": {"stage": 3, "allgather_bucket_size": 5e8}})", 3);
  const std::string line = "[zero] accepted without effect: ";
  ASSERT_NE(out.find(line), std::string::npos) << out;
  EXPECT_EQ(out.find(line), out.rfind(line)) << "printed more than once:\n" << out;
  EXPECT_NE(out.find("zero_optimization.allgather_bucket_size"), std::string::npos) << out;
  EXPECT_NE(out.find("memory_breakdown"), std::string::npos) << out;
}

TEST(ConfigReportTest, NothingPrintedWithoutSuchKeys) {
  const std::string out = StartupOutput(
      R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}})", 2);
  EXPECT_EQ(out.find("accepted without effect"), std::string::npos) << out;
}

}  // namespace
}  // namespace testing
}  // namespace zero
