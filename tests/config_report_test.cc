// Keys accepted without effect are said once, at startup, by rank 0 only
// (docs/DEEPSPEED_COMPAT.md); a config without them says nothing.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/thread_communicator.h"
#include "core/config/config.h"
#include "core/device/guarded_device.h"
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

// offload_param "cpu" (+ pin_memory) takes effect only with the state in
// device memory: at finalize on the CPU device it is reported (rank 0,
// once) or, with untested keys refused, an error on every rank naming it;
// on a device whose memory the host cannot touch (the stand-in for a GPU)
// it takes effect and nothing is said.
struct FinalizeRun {
  std::string err;
  std::vector<absl::Status> status;
};

FinalizeRun FinalizeOn(const std::string& json, int world, bool guarded) {
  auto c = ParseDsConfig(json);
  EXPECT_TRUE(c.ok()) << c.status();
  FinalizeRun out;
  out.status.assign(world, absl::UnknownError("not run"));
  std::mutex mu;
  ::testing::internal::CaptureStderr();
  RunThreads(world, [&](int rank, Communicator* comm) {
    auto e = Engine::Create(*c, comm);
    ASSERT_TRUE(e.ok()) << e.status();
    if (guarded) { ASSERT_TRUE((*e)->SetDevice(MakeGuardedDevice()).ok()); }
    ParamSpec p;
    p.name = "w";
    p.shape = {64};
    ASSERT_TRUE((*e)->RegisterParam(p).ok());
    absl::Status s = (*e)->Finalize();
    std::lock_guard<std::mutex> l(mu);
    out.status[rank] = s;
  });
  out.err = ::testing::internal::GetCapturedStderr();
  return out;
}

constexpr char kParamCpu[] =
    R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
        "offload_param": {"device": "cpu", "pin_memory": true}}})";
constexpr char kParamCpuStrict[] =
    R"({"train_micro_batch_size_per_gpu": 1, "zero_allow_untested_keys": false,
        "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})";

TEST(ConfigReportTest, ParamOffloadCpuReportedAtFinalizeOnTheCpuDevice) {
  const FinalizeRun r = FinalizeOn(kParamCpu, 3, false);
  for (const absl::Status& s : r.status) EXPECT_TRUE(s.ok()) << s;
  const std::string line =
      "[zero] accepted without effect on the cpu device: zero_optimization.offload_param.device, "
      "zero_optimization.offload_param.pin_memory";
  ASSERT_NE(r.err.find(line), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(line), r.err.rfind(line)) << "printed more than once:\n" << r.err;
  EXPECT_EQ(r.err.find("[zero] accepted without effect: "), std::string::npos)
      << "not in the startup report, which cannot know the device:\n" << r.err;

  const FinalizeRun strict = FinalizeOn(kParamCpuStrict, 3, false);
  for (const absl::Status& s : strict.status) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("zero_optimization.offload_param.device: no effect on the cpu"),
              std::string::npos)
        << s;
  }
}

TEST(ConfigReportTest, OptimizerOffloadCpuReportedAtFinalizeOnTheCpuDevice) {
  const FinalizeRun r = FinalizeOn(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})",
                                   2, false);
  for (const absl::Status& s : r.status) EXPECT_TRUE(s.ok()) << s;
  const std::string line =
      "[zero] accepted without effect on the cpu device: "
      "zero_optimization.offload_optimizer.device\n";
  ASSERT_NE(r.err.find(line), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(line), r.err.rfind(line)) << "printed more than once:\n" << r.err;
  const FinalizeRun off = FinalizeOn(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})",
                                     2, true);
  for (const absl::Status& s : off.status) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(off.err.find("accepted without effect"), std::string::npos) << off.err;
}

// With delayed_update, offload_optimizer "cpu" takes effect on the CPU
// device too (the state apart from the working copy): not reported, and
// accepted with untested keys refused; its pin_memory still has no effect.
TEST(ConfigReportTest, DelayedUpdateOffloadCpuTakesEffectOnTheCpuDevice) {
  for (const char* strict : {"", R"("zero_allow_untested_keys": false,)"}) {
    const FinalizeRun r = FinalizeOn(absl::StrCat(R"({"train_micro_batch_size_per_gpu": 1,)",
                                                  strict, R"("zero_optimization": {"stage": 2,
        "offload_optimizer": {"device": "cpu", "delayed_update": true}}})"),
                                     2, false);
    for (const absl::Status& s : r.status) EXPECT_TRUE(s.ok()) << strict << s;
    EXPECT_EQ(r.err.find("accepted without effect"), std::string::npos) << r.err;
  }
  const FinalizeRun pinned = FinalizeOn(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
      "delayed_update": true, "pin_memory": true}}})",
                                        2, false);
  EXPECT_NE(pinned.err.find("[zero] accepted without effect on the cpu device: "
                            "zero_optimization.offload_optimizer.pin_memory\n"),
            std::string::npos)
      << pinned.err;
}

TEST(ConfigReportTest, ParamOffloadCpuTakesEffectSilentlyOffTheHost) {
  for (const char* json : {kParamCpu, kParamCpuStrict}) {
    const FinalizeRun r = FinalizeOn(json, 2, true);
    for (const absl::Status& s : r.status) EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(r.err.find("accepted without effect"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
