// offload_optimizer.delayed_update (ZeRO-Offload's one-step delayed
// parameter update, docs/ARCHITECTURE.md "Offload") on the guarded stand-in
// device and on the CPU device: step by step against the double reference
// that applies each update one step late (TrainMlpReference with
// delayed_update: a step's forward and backward read the params as they
// were before the last boundary's update), at stages 1-3, worlds 1 and 3,
// with accumulation and clipping, an fp16 overflow, a save and a resume;
// refused where it cannot apply.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/parse_config.h"
#include "tests/testing/standin_training.h"

namespace zero {
namespace testing {
namespace {

// fp32 and fp16 are the precise checks: there the one-step-late reference
// is 100x the tolerance away from exact mode's. bf16 forwards read the
// master rounded to 8 bits where the reference reads doubles: its results
// move by about fifteen bf16 epsilons (2^-8) over 8 steps, as far as exact
// mode's reference is: the bf16 runs show the cast path runs, no more.
double Tolerance(DType t) {
  switch (t) {
    case DType::kF32: return 1e-5;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 6e-2;
  }
  return 0;
}

Config Delayed(int stage, DType t, const std::string& mode = "") {
  Config c = Cfg(stage, t);
  ApplyStepMode(mode, &c);
  c.offload_optimizer.device = OffloadDevice::kCpu;
  c.offload_optimizer.delayed_update = true;
  return c;
}

// The stand-in (a GPU's model) or the CPU device, whose host update runs
// beside the caller's compute on the same cores.
MlpSpec OnDevice(bool on_cpu) {
  MlpSpec spec = StandinSpec();
  if (on_cpu) {
    spec.make_device = nullptr;
    spec.caller_copy = nullptr;
  }
  return spec;
}

// The communicators each device runs with: the CPU device's plain thread
// one; the stand-in's staging one, and its NCCL-shaped one above one rank.
std::vector<CommKind> Comms(bool on_cpu, int world) {
  if (on_cpu) return {CommKind::kThread};
  if (world == 1) return {CommKind::kStaging};
  return {CommKind::kStaging, CommKind::kNcclShaped};
}

const char* DeviceName(bool on_cpu) { return on_cpu ? "cpu" : "stand-in"; }

void ExpectNear(const std::vector<absl::StatusOr<MlpResult>>& got, const MlpResult& ref,
                double tol, const std::string& what) {
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_TRUE(got[r].ok()) << what << " rank " << r << ": " << got[r].status();
    EXPECT_LE(MaxRelDiff(*got[r], ref), tol) << what << " rank " << r;
  }
}

// The engine follows the one-step-late reference, and that reference is
// far from exact mode's (the comparison could tell them apart).
void ExpectFollowsTheOneStepLateReference(bool on_cpu) {
  for (int stage : {1, 2, 3}) {
    for (int world : {1, 3}) {
      for (DType t : {DType::kF32, DType::kBF16}) {
        for (const char* mode : {"", "gas2_clip"}) {
          const Config c = Delayed(stage, t, mode);
          MlpSpec spec = OnDevice(on_cpu);
          spec.steps = 8;
          const MlpResult ref = TrainMlpReference(c, spec);
          Config exact = c;
          exact.offload_optimizer.delayed_update = false;
          const MlpResult ref_exact = TrainMlpReference(exact, spec);
          const std::string what = absl::StrCat(DeviceName(on_cpu), " stage ", stage, " world ",
                                                world, " ", DTypeName(t), " ", mode);
          if (t == DType::kF32) {
            EXPECT_GT(MaxRelDiff(ref_exact, ref), 100 * Tolerance(t)) << what;
          }
          for (CommKind k : Comms(on_cpu, world)) {
            const auto got = TrainOn(c, world, spec, k);
            ExpectNear(got, ref, Tolerance(t), what);
            if (got[0].ok()) {
              ASSERT_EQ(got[0]->steps.size(), 8u) << what;
              EXPECT_EQ(got[0]->steps.back().global_step, 8) << what;
            }
          }
        }
      }
    }
  }
}

TEST(DelayedUpdate, FollowsTheReferenceThatUpdatesOneStepLate) {
  ExpectFollowsTheOneStepLateReference(/*on_cpu=*/false);
}

// On the CPU device the store keeps its own master beside the working copy
// the forward reads, which the update thread never touches.
TEST(DelayedUpdate, FollowsTheReferenceOnTheCpuDevice) {
  ExpectFollowsTheOneStepLateReference(/*on_cpu=*/true);
}

// Stage 3 with its own working shard in host memory too (offload_param
// "cpu"): the landed working copy goes to the host shard.
TEST(DelayedUpdate, Stage3WithOffloadParamCpu) {
  for (bool on_cpu : {false, true}) {
    for (int world : {1, 3}) {
      Config c = Delayed(3, DType::kBF16);
      c.offload_param.device = OffloadDevice::kCpu;
      c.offload_param.pin_memory = true;
      MlpSpec spec = OnDevice(on_cpu);
      spec.steps = 7;
      ExpectNear(TrainOn(c, world, spec, Comms(on_cpu, world)[0]), TrainMlpReference(c, spec),
                 Tolerance(DType::kBF16), absl::StrCat(DeviceName(on_cpu), " world ", world));
    }
  }
}

// An fp16 overflow: the step is skipped on every rank, no update starts,
// and the one in flight lands (the next step reads current params).
TEST(DelayedUpdate, Fp16OverflowSkipsAndLandsTheUpdateInFlight) {
  for (bool on_cpu : {false, true}) {
    for (int stage : {1, 2, 3}) {
      for (int world : {1, 3}) {
        const Config c = Delayed(stage, DType::kF16);
        MlpSpec spec = OnDevice(on_cpu);
        spec.steps = 8;
        spec.inf_step = 3;
        spec.inf_rank = world - 1;
        const auto got = TrainOn(c, world, spec, Comms(on_cpu, world)[0]);
        const std::string what =
            absl::StrCat(DeviceName(on_cpu), " stage ", stage, " world ", world);
        const MlpResult ref = TrainMlpReference(c, spec);
        Config exact = c;
        exact.offload_optimizer.delayed_update = false;
        EXPECT_GT(MaxRelDiff(TrainMlpReference(exact, spec), ref), 10 * Tolerance(DType::kF16));
        ExpectNear(got, ref, Tolerance(DType::kF16), what);
        for (size_t r = 0; r < got.size(); ++r) {
          if (!got[r].ok()) continue;
          ASSERT_EQ(got[r]->steps.size(), 8u) << what;
          EXPECT_TRUE(got[r]->steps[3].skipped) << what << " rank " << r;
          EXPECT_EQ(got[r]->steps.back().skipped_steps, 1) << what;
        }
      }
    }
  }
}

// A save lands the update in flight first: the saving run follows the
// reference with that landing, and a run resumed from the checkpoint ends
// bit for bit where the saving run ended.
TEST(DelayedUpdate, SaveLandsTheUpdateAndResumeContinuesBitForBit) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/delayed_update_ckpt");
  for (bool on_cpu : {false, true}) {
    for (int stage : {1, 3}) {
      for (int world : {1, 3}) {
        std::filesystem::remove_all(dir);
        const Config c = Delayed(stage, DType::kF32);
        MlpSpec spec = OnDevice(on_cpu);
        spec.steps = 8;
        spec.ckpt_dir = dir;
        spec.save_after = 4;
        const std::string what =
            absl::StrCat(DeviceName(on_cpu), " stage ", stage, " world ", world);
        const CommKind comm = Comms(on_cpu, world)[0];
        const auto saved = TrainOn(c, world, spec, comm);
        ExpectNear(saved, TrainMlpReference(c, spec), Tolerance(DType::kF32), what);
        MlpSpec resume = OnDevice(on_cpu);
        resume.steps = 8;
        resume.resume_dir = dir;
        resume.resume_tag = "mid";
        const auto resumed = TrainOn(c, world, resume, comm);
        for (int r = 0; r < world; ++r) {
          ASSERT_TRUE(saved[r].ok() && resumed[r].ok()) << what << ": " << resumed[r].status();
          EXPECT_EQ(MaxRelDiff(*resumed[r], *saved[r]), 0.0) << what << " rank " << r;
        }
      }
    }
  }
}

// write_master while an update is in flight: the update completes first,
// and the written values replace both the master and the working copy it
// was to land at the next boundary: the steps after read them.
TEST(DelayedUpdate, WriteMasterReplacesTheLandingWorkingCopy) {
  Config c = Delayed(2, DType::kF32);
  MlpSpec spec = StandinSpec();
  spec.steps = 5;
  spec.caller_copy = nullptr;
  std::vector<float> written;
  auto read_working = [](Engine* e, int id) -> absl::StatusOr<std::vector<float>> {
    ASSIGN_OR_RETURN(int64_t n, e->ParamNumel(id));
    ASSIGN_OR_RETURN(void* d, e->Gather(id));
    std::vector<float> v(n);
    e->device()->Copy(v.data(), d, n * 4);
    RETURN_IF_ERROR(e->Release(id));
    return v;
  };
  int checked = 0;
  spec.hook = [&](Engine* e, int step, int index) -> absl::Status {
    if (index != -1 || step < 2 || step > 3) return absl::OkStatus();
    if (step == 2) {
      ASSIGN_OR_RETURN(int64_t n, e->ParamNumel(1));
      written.assign(n, 0.25f);
      RETURN_IF_ERROR(e->WriteMaster(1, written.data()));
    }
    // Step 2's forward reads the written values; so does step 3's: the
    // working copy landed at step 2's boundary is the master before step
    // 2's update, which write_master set.
    ASSIGN_OR_RETURN(std::vector<float> seen, read_working(e, 1));
    if (seen != written) {
      return absl::InternalError(absl::StrCat("step ", step, ": param 1 is not what was written"));
    }
    ++checked;
    return absl::OkStatus();
  };
  const auto got = TrainOn(c, 1, spec, CommKind::kStaging);
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_EQ(checked, 2);
}

// The ds_config key, and a wrong value named.
TEST(DelayedUpdate, ParsedFromTheDsConfig) {
  const Config c = Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "delayed_update": true}}})");
  EXPECT_TRUE(c.offload_optimizer.delayed_update);
  EXPECT_FALSE(Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"}}})").offload_optimizer.delayed_update);
  EXPECT_NE(Error(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "delayed_update": "yes"}}})")
                .find("offload_optimizer.delayed_update"),
            std::string::npos);
}

// A pointer a caller holds across steps (gather at stages 1-2, as the C
// ABI's zero_engine_gather hands out: the resident working copy): after
// step s returns it holds exactly the master read_master gave before step
// s (which waits for the update in flight: the master after step s-1's
// update), and not the master after step s's own update.
TEST(DelayedUpdate, HeldPointerHoldsTheMasterOfOneUpdateEarlier) {
  for (const auto& [stage, on_cpu] : {std::pair{1, false}, {2, false}, {1, true}, {2, true}}) {
    Config c = Delayed(stage, DType::kF32);
    MlpSpec spec = OnDevice(on_cpu);
    spec.steps = 5;
    spec.caller_copy = nullptr;
    void* held = nullptr;
    std::vector<float> before;  // read_master at the top of the last step
    int checked = 0;
    spec.hook = [&](Engine* e, int step, int index) -> absl::Status {
      if (index != -1) return absl::OkStatus();
      ASSIGN_OR_RETURN(int64_t n, e->ParamNumel(1));
      if (held == nullptr) {
        ASSIGN_OR_RETURN(held, e->Gather(1));
        RETURN_IF_ERROR(e->Release(1));
      }
      std::vector<float> now(n), seen(n);
      RETURN_IF_ERROR(e->ReadMaster(1, now.data()));
      e->device()->Copy(seen.data(), held, n * 4);
      if (!before.empty()) {
        if (seen != before) {
          return absl::InternalError(absl::StrCat("step ", step, ": the held pointer is not "
                                                  "the master read before the last step"));
        }
        if (seen == now) {
          return absl::InternalError(absl::StrCat("step ", step, ": the held pointer already "
                                                  "holds the last step's update"));
        }
        ++checked;
      }
      before = now;
      return absl::OkStatus();
    };
    const auto got = TrainOn(c, 1, spec, Comms(on_cpu, 1)[0]);
    ASSERT_TRUE(got[0].ok()) << DeviceName(on_cpu) << " stage " << stage << ": "
                             << got[0].status();
    EXPECT_EQ(checked, 4) << DeviceName(on_cpu) << " stage " << stage;
  }
}

// Refused by name where there is no host update to run behind the device:
// offload_optimizer "none" or "nvme", on either device.
TEST(DelayedUpdate, RefusedWithoutOffloadOptimizerCpu) {
  for (bool on_cpu : {true, false}) {
    for (OffloadDevice d : {OffloadDevice::kNone, OffloadDevice::kNvme}) {
      Config c = Delayed(2, DType::kF32);
      c.offload_optimizer.device = d;
      c.offload_optimizer.nvme_path = ::testing::TempDir();
      const auto got = TrainOn(c, 1, OnDevice(on_cpu), CommKind::kThread);
      ASSERT_FALSE(got[0].ok()) << DeviceName(on_cpu);
      EXPECT_NE(std::string(got[0].status().message()).find("offload_optimizer.delayed_update"),
                std::string::npos)
          << got[0].status();
    }
  }
}

// Mid-accumulation a save cannot land the update (the params would change
// between micro-steps): refused on every rank, naming the key.
TEST(DelayedUpdate, SaveMidAccumulationRefused) {
  Config c = Delayed(2, DType::kF32, "gas2_clip");
  MlpSpec spec = StandinSpec();
  spec.steps = 3;
  int calls = 0;
  const std::string dir = absl::StrCat(::testing::TempDir(), "/delayed_mid");
  spec.hook = [&](Engine* e, int step, int index) -> absl::Status {
    if (step != 1 || index == -1) return absl::OkStatus();
    // The first GradReady of the second micro-step: micro_step 1.
    if (++calls != 5) return absl::OkStatus();
    return e->Save(dir, "mid");
  };
  const auto got = TrainOn(c, 1, spec, CommKind::kStaging);
  ASSERT_FALSE(got[0].ok());
  EXPECT_NE(std::string(got[0].status().message()).find("delayed_update"), std::string::npos)
      << got[0].status();
}

}  // namespace
}  // namespace testing
}  // namespace zero
