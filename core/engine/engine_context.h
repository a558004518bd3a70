// What every part of the engine shares (docs/ARCHITECTURE.md, "The engine's
// parts"): the resolved config, the communicators, the devices, the comm
// stream, this rank's place, the flat layout, and the first failure. The
// Engine owns everything the pointers name; the parts only borrow it.
#ifndef ZERO_CORE_ENGINE_ENGINE_CONTEXT_H_
#define ZERO_CORE_ENGINE_ENGINE_CONTEXT_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "core/comm/checked_communicator.h"
#include "core/comm/comm_stream.h"
#include "core/comm/communicator.h"
#include "core/common/dtype.h"
#include "core/common/progress.h"
#include "core/config/config.h"
#include "core/device/device.h"
#include "core/engine/offload_placement.h"
#include "core/partition/layout.h"
#include "core/profile/recorder.h"

namespace zero {

class Hierarchy;

struct EngineContext {
  Config config;                  // "auto" values resolved at finalize
  Communicator* comm = nullptr;   // data collectives, buffers in device memory
  Communicator* ctrl = nullptr;   // scalars in host memory
  Device* device = nullptr;       // where model state lives
  Device* host = nullptr;         // host memory (ZeRO-Offload)
  CommStream* stream = nullptr;   // reductions and prefetch (overlap_comm)
  int rank = 0, world = 1;
  Layout layout;                  // fixed at finalize
  OffloadPlacement placement;     // where each state lives; fixed at finalize
  // Beyond one node (core/engine/hierarchy.h): the topology and the
  // sub-communicators. With hybrid sharding comm/rank/world are the shard
  // group's and `replicas` groups hold copies of each shard.
  Hierarchy* hier = nullptr;
  int replicas = 1;
  // The checked communicator under `comm` when it spans every rank (no
  // hybrid sharding): the reducer's end-of-micro-step marker goes through
  // it (core/engine/deferred_gradients.h). Null otherwise.
  CheckedCommunicator* checked = nullptr;

  // Ranks a gradient is averaged over (data-parallel world).
  int dp_world() const { return world * replicas; }
  Recorder* recorder = nullptr;   // wall_clock_breakdown / zero_trace; null when off
  ProgressCallback progress;      // long work (save, load, NVMe preallocation); empty: none

  DType dtype() const { return config.dtype; }
  size_t es() const { return DTypeSize(config.dtype); }
  int stage() const { return config.stage; }

  // Records the first failure of a collective or IO: a failed engine
  // refuses every later call (ZERO_ABORTED / the original code).
  absl::Status Fail(absl::Status s) {
    if (!s.ok() && broken.ok()) broken = s;
    return s;
  }
  absl::Status broken;
  // The last checkpoint this engine saved or loaded ("'dir/tag' (global
  // step N)"; empty: none), named when a failed step leaves NVMe state
  // unusable.
  std::string last_checkpoint;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_ENGINE_CONTEXT_H_
