// Pretrained weights from safetensors, sharded (docs/ARCHITECTURE.md,
// "Pretrained weights"): every rank reads only the elements it holds — the
// fp32 master range it owns and the working copy it keeps (stages 0-2 the
// whole param; stage 3 its owned slice; persistent stage-3 params and
// frozen params whole) — converting F32/F16/BF16 to fp32 chunk by chunk.
// Every rank validates everything first (files, names, shapes, dtypes) and
// the ranks agree on the outcome before any state changes.
#ifndef ZERO_CORE_ENGINE_PRETRAINED_LOADER_H_
#define ZERO_CORE_ENGINE_PRETRAINED_LOADER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/engine/engine_context.h"
#include "core/engine/param_registry.h"

namespace zero {

class ShardedState;
class OptimizerStateStore;
class ParamCoordinator;

struct PretrainedOptions {
  // A param whose tensor the file lacks keeps its values (else an error).
  bool allow_missing = false;
  // A file tensor's name maps to a param name as prefix_add + (name without
  // a leading prefix_strip): e.g. prefix_strip "model." for HF checkpoints.
  std::string prefix_strip, prefix_add;
};

struct PretrainedStats {
  int64_t bytes_read = 0;           // tensor data this rank read
  int loaded = 0;                   // params set
  std::vector<std::string> missing;  // params the file lacks (allow_missing)
  std::vector<std::string> extra;    // file tensors no param took
};

// The engine's parts the loader writes; `coordinator` is null below stage 3.
struct PretrainedTargets {
  EngineContext* ctx = nullptr;
  const ParamRegistry* params = nullptr;
  ShardedState* sharded = nullptr;
  OptimizerStateStore* store = nullptr;
  ParamCoordinator* coordinator = nullptr;
};

// COLLECTIVE over ctx->ctrl; call on the comm stream. `pre` is the caller's
// precondition (released, not mid-accumulation); it is agreed on with the
// validation. Any failure after writing began poisons the engine.
absl::Status LoadPretrained(const PretrainedTargets& t, const std::string& path,
                            const PretrainedOptions& options, const absl::Status& pre,
                            PretrainedStats* stats);

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_PRETRAINED_LOADER_H_
