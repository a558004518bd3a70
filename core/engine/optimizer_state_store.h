// Where the fp32 master weights and optimizer moments of this rank's owned
// range live (docs/ARCHITECTURE.md, "Offload"). Chosen once at
// finalize from offload_optimizer.device and the device:
//   DeviceStateStore  in the engine's device memory (the CPU device: RAM);
//   HostStateStore    ZeRO-Offload: host memory, updated by the CPU, the
//                     working copy pipelined up to the device;
//   NvmeStateStore    files under nvme_path, streamed through host buffers.
#ifndef ZERO_CORE_ENGINE_OPTIMIZER_STATE_STORE_H_
#define ZERO_CORE_ENGINE_OPTIMIZER_STATE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/engine/engine_context.h"
#include "kernels/optim_math.h"

namespace zero {

class ShardedState;

// The fp32 arrays kept per owned element: 0 the master, then the
// optimizer's moments (Optimizer::moments, core/optim/optimizer.h).
int StateArrays(const Config& c);

// fn(at, len, src): initial master values of owned elements [at, at+len) of
// one group are src[0..len). Visits the parts of group g's owned elements
// [a, b) that belong to registered params (padding stays zero).
using InitPiece = std::function<void(int64_t at, int64_t len, const float* src)>;
using InitVisitor = std::function<void(int g, int64_t a, int64_t b, const InitPiece& fn)>;

// One optimizer step over the owned range, as the boundary prepared it.
struct OptimizerUpdate {
  const std::vector<float*>* grads = nullptr;  // fp32 owned gradients, device memory
  math::OptimScalars scalars{};  // the step of Optimizer::Scalars (core/optim/optimizer.h)
  // The step on the engine's device for elements [begin, begin+len) of
  // group g whose state is at master/s1/s2 (the optimizer's moments; s1,
  // s2 may be null); writes the working copy (staged to the param file
  // with offload_param "nvme").
  std::function<absl::Status(int g, int64_t begin, int64_t len, float* master,
                             float* s1, float* s2)> on_device;
  // Device-resident updates run in pieces of this many elements (the
  // sub-group size when the working copy is staged through a file).
  int64_t piece = INT64_MAX;
  // COLLECTIVE: true when every rank's state write succeeded (NVMe).
  std::function<absl::StatusOr<bool>(bool ok)> agree;
};

// One piece of an update: elements [begin, begin+len) of group `group`.
struct UpdatePiece {
  int group = 0;
  int64_t begin = 0, len = 0;
};

struct StateStoreStats {
  int64_t master_bytes = 0, optimizer_bytes = 0;  // resident in memory
  int64_t device_buffer_bytes = 0;  // the store's own device buffers
  int64_t file_bytes = 0, read_bytes = 0, write_bytes = 0;
  int direct_io = 0, uring = 0;
  std::string note;
};

class OptimizerStateStore {
 public:
  virtual ~OptimizerStateStore() = default;

  // Master from the init values, moments zero.
  virtual absl::Status Initialize(const InitVisitor& init) = 0;
  virtual absl::Status Update(const OptimizerUpdate& u) = 0;
  // The pieces Update hands to on_device, in order, when the store knows
  // them ahead (NVMe: its chunks), so the caller can read their gradients
  // ahead (core/engine/update_io_pipeline.h); empty otherwise.
  virtual std::vector<UpdatePiece> UpdateOrder() const { return {}; }
  // offload_optimizer.delayed_update (HostStateStore): waits for the update
  // started at the last boundary and writes its working copy into this
  // rank's owned range, for the caller to publish. False when none was in
  // flight (every other store: Update is synchronous).
  virtual absl::StatusOr<bool> LandDelayed() { return false; }

  // Owned elements [begin, begin+len) of array `array` of group g, to or
  // from host memory, wherever the state lives (checkpoints, read_master).
  virtual absl::Status Read(int g, int array, int64_t begin, int64_t len, float* out) = 0;
  virtual absl::Status Write(int g, int array, int64_t begin, int64_t len,
                             const float* in) = 0;
  // The master of owned elements [begin, begin+len) in device memory, for a
  // collective: in place when it lives there, else copied into `scratch`.
  virtual absl::StatusOr<const float*> MasterOnDevice(int g, int64_t begin, int64_t len,
                                                      DeviceBuffer* scratch) = 0;
  // Group g's whole owned master cast to the working dtype at `dst`, in the
  // engine device's memory (a checkpoint load rebuilds the working copy).
  virtual absl::Status CastMaster(int g, void* dst) = 0;

  // Checkpoints see the state through memory (InMemory), or, where that is
  // null (NVMe), stream it through Read/Write. A store could instead fill
  // memory buffers for the duration (Materialize) and write them back after
  // a load (Spill(true)); none does now.
  virtual absl::Status Materialize() { return absl::OkStatus(); }
  virtual absl::Status Spill(bool write_back) { return absl::OkStatus(); }
  // Array `array` of group g in memory (null: not resident, or no such array).
  virtual float* InMemory(int g, int array) = 0;
  // The device whose memory InMemory() points into (the host device for
  // ZeRO-Offload, the engine's device otherwise).
  virtual Device* memory_device() const = 0;

  virtual StateStoreStats stats() const = 0;
};

// The store for this config and device; allocates it (not yet initialized).
absl::StatusOr<std::unique_ptr<OptimizerStateStore>> MakeOptimizerStateStore(
    EngineContext* ctx, ShardedState* sharded);

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_OPTIMIZER_STATE_STORE_H_
