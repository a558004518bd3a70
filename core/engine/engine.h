// The engine: owns where every byte of model state lives and when it moves
// (docs/ARCHITECTURE.md). The caller owns the model's math; it asks for
// params (gather/release), hands in gradients (grad_buffer/grad_ready) and
// calls Step() once per micro-step. This class is the front that checks each
// call and wires the parts together; each concern lives in its own file:
//   param_registry      what was registered; ranks agree at finalize
//   sharded_state       working copy, gradients, frozen params
//   optimizer_state_store (+ memory/host/nvme)  master weights and moments
//   param_coordinator   stage 3 gather/release, prefetch, live budget
//   gradient_reducer    buckets and each stage's reduction
//   optimizer_boundary  accumulation, norm, scaler, clip, update, publish
//   engine_checkpoint   save/load glue;  engine_stats, step_log  reporting
#ifndef ZERO_CORE_ENGINE_ENGINE_H_
#define ZERO_CORE_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ckpt/async_saver.h"
#include "core/ckpt/shard_view.h"
#include "core/comm/call_site.h"
#include "core/comm/checked_communicator.h"
#include "core/comm/comm_stream.h"
#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/device/device.h"
#include "core/engine/engine_context.h"
#include "core/engine/engine_stats.h"
#include "core/engine/optimizer_boundary.h"
#include "core/engine/param_registry.h"
#include "core/engine/preemption.h"
#include "core/engine/pretrained_loader.h"
#include "core/partition/layout.h"
#include "core/profile/comm_log.h"
#include "core/profile/recorder.h"

namespace zero {

class Hierarchy;
class ShardedState;
class OptimizerStateStore;
class ParamCoordinator;
class GradientReducer;
class EngineCheckpoint;
class StepLog;

class Engine {
 public:
  // `comm` is not owned and must outlive the engine; the engine talks over a
  // duplicate of it, so the caller may keep using `comm` meanwhile.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const Config& config,
                                                        Communicator* comm);
  ~Engine();

  // Before finalize: where model state lives (default: the CPU device, or
  // the communicator's GPU for a device communicator).
  absl::Status SetDevice(std::unique_ptr<Device> device);
  Device* device() const { return device_.get(); }

  absl::StatusOr<int> RegisterParam(const ParamSpec& spec);
  absl::Status Finalize();

  int num_params() const { return params_.size(); }
  absl::StatusOr<int> FindParam(const std::string& name) const { return params_.Find(name); }
  absl::StatusOr<int64_t> ParamNumel(int id) const;
  // What was registered for param `id` (init values are not kept).
  absl::StatusOr<ParamSpec> ParamInfo(int id) const;
  // The engine's own copy of the name (valid for its life); id must be valid.
  const char* ParamName(int id) const { return params_.at(id).name.c_str(); }

  absl::StatusOr<void*> Gather(int id);
  // A gather of `id` whose full working copy lands in the caller's `dst`
  // (`bytes` of `dtype`, both the param's); ended by Release like a Gather
  // (docs/ARCHITECTURE.md, "Stage 3", gather_into). Stages 0-2: a copy of
  // the resident working copy.
  absl::Status GatherInto(int id, DType dtype, void* dst, size_t bytes);
  absl::Status Release(int id);
  // A block's params in one call (docs/ARCHITECTURE.md, "Stage 3", batched
  // gathers): GatherInto(ids[k], dtype, dsts[k], bytes[k]) for k in order,
  // every id, dtype, size and dst checked before any moves (an error names
  // the entry and its param); one failing partway releases what this call
  // gathered. ReleaseMany: Release of each, refused before any is released
  // when one is not gathered as often as the list names it.
  absl::Status GatherIntoMany(const int32_t* ids, size_t count, DType dtype,
                              void* const* dsts, const size_t* bytes);
  absl::Status ReleaseMany(const int32_t* ids, size_t count);
  absl::StatusOr<void*> GradBuffer(int id);
  absl::Status GradReady(int id);
  absl::StatusOr<StepInfo> Step();
  absl::Status ReadMaster(int id, float* out);
  // Not collective: sets param `id` to `values` (numel fp32, the same on
  // every rank): the master of the owned part and every working copy this
  // rank holds. Refused while the param is gathered or mid-accumulation.
  absl::Status WriteMaster(int id, const float* values);
  // Not collective, like WriteMaster, for elements [offset, offset+count)
  // of param `id` only (`values` holds count fp32): touches only what this
  // rank holds of that range, so no rank needs the whole param.
  absl::Status WriteMasterRange(int id, int64_t offset, int64_t count, const float* values);
  void ReportSamples(int64_t n);
  // Not collective: `bytes` from src to dst (host memory or this engine's
  // device memory, either side), after the device's queued work; complete on
  // return. How a binding reads or fills device buffers (zero_engine_copy).
  absl::Status CopyMemory(void* dst, const void* src, size_t bytes);

  // This rank's owned fp32 optimizer state of group g, elements [begin,
  // begin+len) of its owned range; array 0 master, 1 m (SGD: momentum), 2 v.
  // Works wherever the state lives (memory or NVMe): for checkpoints.
  // Writing an fp32 master that is the working copy's owned range
  // (DeviceStateStore::Allocate) writes this rank's working copy there too.
  absl::Status ReadOwnedState(int g, int array, int64_t begin, int64_t len, float* out);
  absl::Status WriteOwnedState(int g, int array, int64_t begin, int64_t len, const float* in);

  double loss_scale() const { return boundary_->scaler().scale(); }
  EngineStats Stats() const;
  // Observing a run (docs/ARCHITECTURE.md): the last optimizer step's
  // breakdown (null unless wall_clock_breakdown or zero_trace), the
  // collective log (null unless comms_logger.enabled).
  const Recorder* recorder() const { return recorder_.get(); }
  const CommLog* comm_log() const { return comm_log_.get(); }
  // Writes the zero_trace file now (it is written when end_step is reached
  // and at destruction otherwise).
  absl::Status FlushTrace();
  // Progress of save, load and (set before Finalize) the NVMe tier's
  // preallocation and first write; empty: none. Save/Load options that
  // carry their own progress take precedence.
  void set_progress(ProgressCallback cb) { ctx_.progress = std::move(cb); }
  const Config& config() const { return ctx_.config; }
  const Layout& layout() const { return ctx_.layout; }

  // COLLECTIVE. Checkpoints (docs/ARCHITECTURE.md, "Checkpoints";
  // core/ckpt/). Save only at an optimizer boundary (not mid-accumulation).
  // Load after Finalize with every param released; `tag` empty loads
  // DIR/latest. World size and stage may differ from the saving run.
  absl::Status Save(const std::string& dir, const std::string& tag,
                    const ckpt::SaveOptions& options = {});
  absl::Status Load(const std::string& dir, const std::string& tag,
                    const ckpt::LoadOptions& options = {});
  // Not collective by itself (the background save it waits for is): waits
  // for an asynchronous save in flight and returns its status, once.
  absl::Status WaitForCheckpoint();
  // The last save's blocking, snapshot and background-write seconds.
  ckpt::SaveTiming LastCheckpointTiming() const;
  // After Finalize. On options.signal any rank receives, every rank saves
  // the step that ends next to options.dir and exits (docs/ARCHITECTURE.md,
  // "Preemption"); null turns it off.
  absl::Status SetPreemption(const PreemptionOptions* options);

  // COLLECTIVE. Pretrained weights from a .safetensors file or a Hugging
  // Face *.safetensors.index.json (docs/ARCHITECTURE.md, "Pretrained
  // weights"): each rank reads only the elements it holds. After Finalize,
  // every param released, not mid-accumulation; fails alike on every rank.
  absl::Status LoadSafetensors(const std::string& path, const PretrainedOptions& options = {},
                               PretrainedStats* stats = nullptr);

  // The last zero_flight_recorder_size collectives of this engine, one JSON
  // object per line, oldest first (docs/ARCHITECTURE.md, "Flight
  // recorder"); readable at any time, also after the engine failed.
  std::string FlightRecord() const;

 private:
  Engine(const Config& config, std::unique_ptr<Communicator> comm);

  absl::Status Check(bool finalized, const char* call) const;
  // Files this thread's collectives under `call` at the current step and
  // micro-step for the scope (core/comm/call_site.h).
  ScopedCallSite Site(ApiCall call) const;
  // COLLECTIVE: the ranks check, before any local precondition, that they
  // all enter this call at the same step (CheckedCommunicator::AgreeOnCall).
  absl::Status AgreeOnCall();
  absl::Status AfterFailedStep(const absl::Status& s) const;
  // Step at the boundary: no trainable param gathered as a copy
  // (ParamRecord::gathered_copies), else an error naming them.
  absl::Status CheckNoStaleCopies() const;
  // What GatherInto refuses of its arguments (id, dtype, size, dst), naming
  // the param; GatherIntoMany checks every entry with it first.
  absl::Status CheckGatherIntoArgs(int id, DType dtype, const void* dst, size_t bytes) const;
  // Waits for the device's queued work; its sticky error, if any, fails the
  // engine naming `call` and the device.
  absl::Status DeviceReady(const char* call);
  absl::Status ReportDeviceOnlyKeys() const;
  absl::Status CheckOwnedRange(int g, int array, int64_t begin, int64_t len,
                               const char* call) const;
  // Sizes that were "auto" or absent from the ds_config, from the model, as
  // the HF integration resolves "auto".
  void ResolveAuto();
  // write_master's preconditions: finalized, a valid id, values, the param
  // released, not mid-accumulation.
  absl::Status CheckWritable(int id, const float* values, const char* what);
  absl::Status CreateParts();
  void RecordStep(bool boundary);
  // COLLECTIVE. offload_optimizer.delayed_update: before `call` (save, load,
  // load_safetensors) the update in flight completes and is published;
  // refused mid-accumulation, where it would change the params between
  // micro-steps (docs/ARCHITECTURE.md, "Offload").
  absl::Status LandDelayedUpdate(const char* call);

  // Owned resources, then the context that borrows them, then the parts.
  // The checked communicators' shared state (flight recorder, divergence).
  std::shared_ptr<DivergenceMonitor> monitor_;
  CheckedCommunicator* checked_world_ = nullptr;  // every rank; owned via hier_ or comm_
  std::unique_ptr<Hierarchy> hier_;           // topology, sub-communicators, link counters
  // The devices outlive the communicators: a staging communicator keeps
  // page-locked buffers the device allocated and frees them through it.
  std::unique_ptr<Device> device_;
  std::unique_ptr<Device> host_;
  // The recorder and the log outlive the communicator that reports to them.
  std::unique_ptr<Recorder> recorder_;
  std::unique_ptr<CommLog> comm_log_;
  std::unique_ptr<Communicator> comm_;        // data: buffers in device memory
  std::unique_ptr<Communicator> ctrl_owned_;  // device communicators' scalar view
  std::unique_ptr<CommStream> stream_;
  EngineContext ctx_;
  bool finalized_ = false;

  ParamRegistry params_;
  std::unique_ptr<OptimizerBoundary> boundary_;
  std::unique_ptr<StepLog> log_;
  std::unique_ptr<ShardedState> sharded_;
  std::unique_ptr<OptimizerStateStore> store_;
  std::unique_ptr<ParamCoordinator> coordinator_;  // stage 3
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<EngineCheckpoint> checkpoint_;
  std::unique_ptr<Preemption> preemption_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_ENGINE_H_
