// The interface between the engine and the checkpoint code: a view of what
// one rank holds (no ownership, no copies), and the save/load options.
// Params are addressed by name and element range, never by rank layout, so
// a checkpoint of any world size or stage loads into any other.
#ifndef ZERO_CORE_CKPT_SHARD_VIEW_H_
#define ZERO_CORE_CKPT_SHARD_VIEW_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/common/dtype.h"
#include "core/config/config.h"
#include "core/device/device.h"
#include "core/optim/loss_scaler.h"

namespace zero {
namespace ckpt {

// fp32 model state kept per trainable element. Frozen params are stored as
// kMaster too (their fp32 value).
enum StateKind { kMaster = 0, kExpAvg = 1, kExpAvgSq = 2, kMomentum = 3, kNumStates = 4 };

// Section names in files and messages: "master", "exp_avg", "exp_avg_sq",
// "momentum".
const char* StateName(int kind);
int StateFromName(const std::string& name);  // -1 if unknown

// Called with bytes done and bytes in total on this rank; return false to
// cancel (the call then fails with Cancelled). Runs on the engine's comm
// thread during Engine::Save / Load.
using ProgressFn = std::function<bool(int64_t done, int64_t total)>;

struct SaveOptions {
  ProgressFn progress;
  // Return once this rank's state is copied (core/ckpt/async_saver.h); the
  // files are written and `latest` published in the background.
  bool async = false;
  // > 0: after the new tag is published, rank 0 deletes the oldest tags of
  // DIR (by global step) beyond the newest `keep_last` (core/ckpt/retention.h).
  int keep_last = 0;
  // Leave frozen params out (files and manifest), as DeepSpeed's
  // save_checkpoint(exclude_frozen_parameters=True): an adapter's
  // checkpoint, loaded back (allow_missing) onto the frozen base it was
  // trained on.
  bool exclude_frozen = false;
};

struct LoadOptions {
  bool load_optimizer_states = true;  // false: moments start at zero
  bool allow_missing = false;  // engine params absent from the checkpoint keep their values
  ProgressFn progress;
};

struct RankSlice {
  int rank = 0;
  int64_t offset = 0;  // first element, relative to the param
  int64_t numel = 0;
};

struct ParamView {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  int64_t numel = 0;
  bool trainable = true;
  // Trainable: elements [own_offset, own_offset + own_numel) live on this
  // rank; state[k] points at element own_offset of state k (null: no such
  // state). Save writes the layout slice of each rank (`slices`, this rank's
  // part lies within the owned range); load fills the whole owned range.
  int64_t own_offset = 0, own_numel = 0;
  float* state[kNumStates] = {};
  // When state[k] is null and `io` is set, state k is reached through it,
  // chunk by chunk (state on NVMe, streamed; nothing materialized): n
  // elements at owned index i (element own_offset + i of the param) to
  // (write false) or from (write true) `data`, host memory.
  std::function<absl::Status(int kind, int64_t i, int64_t n, float* data, bool write)> io;
  std::vector<RankSlice> slices;  // every rank's saved slice, numel > 0
  // Frozen: the whole param in `dtype`, on every rank.
  void* whole = nullptr;
  // Frozen, in a snapshot: the whole param as host fp32, used instead of
  // `whole` (core/ckpt/snapshot.h).
  const float* whole_f32 = nullptr;
};

struct ShardView {
  // Where `whole` points: device memory, reached only through
  // Upload/DownloadF32 (null: plain host memory).
  Device* device = nullptr;
  // Where state[] points, the same way. Not always `device`: ZeRO-Offload
  // keeps the optimizer state in host memory beside a GPU.
  Device* state_device = nullptr;
  int rank = 0, world = 1, stage = 0;
  DType dtype = DType::kF32;
  const Config* config = nullptr;
  std::vector<int> states;  // optimizer states beyond kMaster
  std::vector<ParamView> params;  // registration order
  int64_t global_step = 0, skipped_steps = 0, micro_step = 0;
  bool scaler_dynamic = false;
  LossScalerState scaler;
};

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_SHARD_VIEW_H_
