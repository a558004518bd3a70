// An fp32 model's master weights are its working copy's owned range when both
// are in the engine's memory (DeviceStateStore::Allocate, 4 bytes per owned
// element less peak RSS; docs/ARCHITECTURE.md, "Precision"). Against a
// master of its own (SetFp32MasterAliasing(false), the engine before): the
// same bits at stages 0-3 x worlds 1/3 with Adam, accumulation + clipping, SGD with
// momentum, and write_master; checkpoints hold the same states and load
// into either (resharded 3 -> 2); zero_stats' master_bytes is 0 only where
// the master aliases (never fp16/bf16, ZeRO-Offload, NVMe state or params).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/file_util.h"
#include "core/engine/optimizer_state_store.h"
#include "tests/testing/off_host_device.h"
#include "tests/testing/expect_same.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

// Every rank's result, with the master aliased or apart.
std::vector<MlpResult> Train(const Config& c, int world, const MlpSpec& spec, bool alias) {
  SetFp32MasterAliasing(alias);
  std::vector<MlpResult> r = TrainAll(c, world, spec);
  SetFp32MasterAliasing(true);
  return r;
}

std::string TmpDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string d = ckpt::JoinPath(t ? t : "/tmp", name);
  EXPECT_TRUE(ckpt::RemoveTree(d).ok());
  return d;
}

TEST(MasterAliasTest, SameBitsAsASeparateMaster) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 3}) {
      for (const char* mode : {"adamw", "gas2_clip", "sgd", "write_master"}) {
        const std::string m = mode;
        Config c = SmallMlpConfig(stage, DType::kF32);
        MlpSpec spec;
        spec.steps = 5;
        ApplyStepMode(m, &c);
        if (m == "write_master") {
          // Before step 3 every param is set to 0.9x its master: the
          // aliased master and the working copy both take it.
          spec.hook = [](Engine* e, int step, int index) -> absl::Status {
            if (step != 3 || index != -1) return absl::OkStatus();
            for (int id = 0; id < e->num_params(); ++id) {
              ASSIGN_OR_RETURN(const int64_t n, e->ParamNumel(id));
              std::vector<float> v(n);
              RETURN_IF_ERROR(e->ReadMaster(id, v.data()));
              for (float& x : v) x *= 0.9f;
              RETURN_IF_ERROR(e->WriteMaster(id, v.data()));
            }
            return absl::OkStatus();
          };
        }
        const std::string what = absl::StrCat("stage ", stage, " world ", world, " ", m);
        const std::vector<MlpResult> on = Train(c, world, spec, true);
        const std::vector<MlpResult> off = Train(c, world, spec, false);
        for (int r = 0; r < world; ++r) {
          ExpectSameBits(on[r], off[r], absl::StrCat(what, " rank ", r));
          const EngineStats& a = on[r].stats;
          const EngineStats& b = off[r].stats;
          const int64_t owned = a.padded_numel / (stage == 0 ? 1 : world);
          EXPECT_EQ(a.master_bytes, 0) << what;
          EXPECT_EQ(b.master_bytes, owned * 4) << what;
          EXPECT_EQ(a.optimizer_bytes, b.optimizer_bytes) << what;
          EXPECT_EQ(a.param_bytes, b.param_bytes) << what;
        }
        if (m == "gas2_clip") {  // and both train like the double reference
          EXPECT_LT(MaxRelDiff(on[0], TrainMlpReference(c, spec)), 1e-4) << what;
        }
      }
    }
  }
}

// Where the master is not the engine device's fp32 working copy, it keeps
// its own buffer (or file) either way, with the same bits.
TEST(MasterAliasTest, OtherPlacesKeepTheirOwnMaster) {
  for (int stage : {1, 3}) {
    for (const char* mode : {"bf16", "zero_offload", "nvme_optimizer", "nvme_params"}) {
      const std::string m = mode;
      if (m == "nvme_params" && stage != 3) continue;
      Config c = SmallMlpConfig(stage, m == "bf16" ? DType::kBF16 : DType::kF32);
      MlpSpec spec;
      spec.steps = 4;
      if (m == "zero_offload") {
        c.offload_optimizer.device = OffloadDevice::kCpu;
        spec.make_device = [] { return std::make_unique<OffHostDevice>(); };
      }
      if (m == "nvme_optimizer" || m == "nvme_params") {
        c.offload_optimizer.device = OffloadDevice::kNvme;
        c.offload_optimizer.nvme_path = TmpDir(absl::StrCat("alias_", m, stage));
        ASSERT_TRUE(ckpt::MakeDirs(c.offload_optimizer.nvme_path).ok());
      }
      if (m == "nvme_params") {
        c.offload_param.device = OffloadDevice::kNvme;
        c.offload_param.nvme_path = c.offload_optimizer.nvme_path;
      }
      const std::string what = absl::StrCat("stage ", stage, " ", m);
      const std::vector<MlpResult> on = Train(c, 3, spec, true);
      const std::vector<MlpResult> off = Train(c, 3, spec, false);
      for (int r = 0; r < 3; ++r) {
        ExpectSameBits(on[r], off[r], absl::StrCat(what, " rank ", r));
        EXPECT_EQ(on[r].stats.master_bytes, off[r].stats.master_bytes) << what;
        if (m == "bf16" || m == "zero_offload") {
          EXPECT_EQ(on[r].stats.master_bytes, on[r].stats.padded_numel / 3 * 4) << what;
        }
      }
    }
  }
}

// A checkpoint of the aliased engine holds the same states as one of the
// engine with a master of its own, and each loads into the other, at 3 ranks
// and resharded to 2, continuing to the same bits.
TEST(MasterAliasTest, CheckpointsAreTheSameAndLoadEitherWay) {
  for (int stage : {1, 3}) {
    const Config c = SmallMlpConfig(stage, DType::kF32);
    std::string dirs[2];
    for (int alias = 0; alias < 2; ++alias) {
      MlpSpec spec;
      spec.steps = 5;
      spec.ckpt_dir = dirs[alias] = TmpDir(absl::StrCat("alias_ckpt", stage, "_", alias));
      spec.save_after = 3;
      spec.final_tag = "final";
      Train(c, 3, spec, alias == 1);
    }
    for (const char* tag : {"mid", "final"}) {
      const auto a = CheckpointStates(dirs[0], tag), b = CheckpointStates(dirs[1], tag);
      ASSERT_EQ(a.size(), b.size());
      for (const auto& [key, v] : a) {
        ASSERT_TRUE(b.count(key)) << key;
        EXPECT_EQ(std::memcmp(v.data(), b.at(key).data(), v.size() * 4), 0)
            << "stage " << stage << " " << tag << ": " << key;
      }
    }
    for (int world : {3, 2}) {
      MlpSpec resume;
      resume.steps = 5;
      resume.resume_tag = "mid";
      resume.resume_dir = dirs[0];  // saved apart, loaded aliased
      const std::vector<MlpResult> x = Train(c, world, resume, true);
      resume.resume_dir = dirs[1];  // saved aliased, loaded apart
      const std::vector<MlpResult> y = Train(c, world, resume, false);
      ExpectSameBits(x[0], y[0], absl::StrCat("stage ", stage, " resumed at ", world));
      EXPECT_EQ(x[0].steps.back().global_step, 5);
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
