#include "core/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/backend/comm_device_binding.h"
#include "core/backend/staging_communicator.h"
#include "core/common/status_macros.h"
#include "core/engine/auto_sizes.h"
#include "core/engine/engine_checkpoint.h"
#include "core/engine/gradient_reducer.h"
#include "core/engine/hierarchy.h"
#include "core/engine/offload_placement.h"
#include "core/engine/optimizer_state_store.h"
#include "core/engine/param_coordinator.h"
#include "core/engine/sharded_state.h"
#include "core/engine/step_log.h"
#include "core/profile/logging_communicator.h"

namespace zero {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const Config& config,
                                                       Communicator* comm) {
  if (comm == nullptr) return absl::InvalidArgumentError("engine: comm is null");
  Config c = config;
  RETURN_IF_ERROR(c.Resolve(comm->world_size()));
  comm->set_timeout_seconds(c.comm_timeout_seconds);
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> dup, comm->Duplicate());
  // Every collective of the engine, its sub-groups included, is checked
  // before data moves (docs/ARCHITECTURE.md, "When ranks disagree").
  auto monitor = std::make_shared<DivergenceMonitor>(
      dup->rank(), static_cast<int>(c.flight_recorder_size));
  std::unique_ptr<CheckedCommunicator> checked = MakeCheckedCommunicator(std::move(dup), monitor);
  CheckedCommunicator* checked_world = checked.get();
  std::unique_ptr<Communicator> own = std::move(checked);
  own->set_timeout_seconds(c.comm_timeout_seconds);
  // Keys that change nothing are said once, at startup (docs/DEEPSPEED_COMPAT.md).
  const std::string report = NoEffectReport(c);
  if (!report.empty() && own->rank() == 0) std::fprintf(stderr, "%s\n", report.c_str());
  // Nodes, and the sub-communicators of hybrid sharding and ZeRO++
  // (core/engine/hierarchy.h); `data` is the engine's communicator.
  std::unique_ptr<Communicator> data;
  ASSIGN_OR_RETURN(std::unique_ptr<Hierarchy> hier, Hierarchy::Create(&c, std::move(own), &data));
  std::unique_ptr<Engine> e(new Engine(c, std::move(data)));
  e->monitor_ = std::move(monitor);
  e->checked_world_ = checked_world;
  e->hier_ = std::move(hier);
  e->ctx_.hier = e->hier_.get();
  e->ctx_.replicas = e->hier_->replicas();
  if (e->ctx_.replicas == 1) e->ctx_.checked = checked_world;
  return e;
}

Engine::Engine(const Config& config, std::unique_ptr<Communicator> comm)
    : device_(MakeCpuDevice()),
      host_(MakeCpuDevice()),
      comm_(std::move(comm)),
      stream_(std::make_unique<CommStream>(config.OverlapComm())),
      params_(config.dtype) {
  ctx_.config = config;
  ctx_.comm = comm_.get();
  ctx_.ctrl = comm_.get();
  ctx_.device = device_.get();
  ctx_.host = host_.get();
  ctx_.stream = stream_.get();
  ctx_.rank = comm_->rank();
  ctx_.world = comm_->world_size();
  boundary_ = std::make_unique<OptimizerBoundary>(&ctx_);
  log_ = std::make_unique<StepLog>(ctx_.rank, config.steps_per_print);
  const ObserveConfig& o = config.observe;
  if (o.wall_clock_breakdown || !o.trace_path.empty()) {
    recorder_ = std::make_unique<Recorder>(
        ctx_.rank, o.wall_clock_breakdown,
        TraceOptions{o.trace_path, o.trace_start_step, o.trace_end_step});
    ctx_.recorder = recorder_.get();
  }
  if (o.comms_logger) {
    comm_log_ = std::make_unique<CommLog>(ctx_.rank, ctx_.world,
                                          CommLogOptions{o.comms_verbose, o.comms_prof_all,
                                                         o.comms_prof_ops});
  }
}

Engine::~Engine() {
  // Finish in-flight reductions and prefetches before their buffers go away.
  if (stream_) (void)stream_->Drain();
  if (comm_log_ && ctx_.rank == 0) std::fprintf(stderr, "%s", comm_log_->Summary().c_str());
  // The names and the device go away with the engine; the communicators
  // (some held by hier_, destroyed last) make no more collectives.
  if (monitor_) {
    monitor_->set_param_namer(nullptr);
    monitor_->DropHostViews();
  }
}

std::string Engine::FlightRecord() const {
  return monitor_ ? monitor_->recorder().JsonLines(monitor_->namer()) : std::string();
}

absl::Status Engine::AgreeOnCall() {
  // On the stream: a reduction still in flight uses the same communicator.
  absl::Status s = stream_->Wait(stream_->Submit([this] { return checked_world_->AgreeOnCall(); }));
  (void)stream_->Drain();
  return ctx_.Fail(s);
}

ScopedCallSite Engine::Site(ApiCall call) const {
  const StepCounters& k = boundary_->counters();
  return ScopedCallSite(call, k.global_step + k.skipped_steps, k.micro_step);
}

absl::Status Engine::FlushTrace() {
  if (!recorder_) return absl::OkStatus();
  return recorder_->FlushTrace();
}

absl::Status Engine::Check(bool finalized, const char* call) const {
  if (!ctx_.broken.ok()) {
    return absl::Status(ctx_.broken.code(),
                        absl::StrCat(call, ": the engine failed earlier and is "
                                           "unusable: ", ctx_.broken.message()));
  }
  if (finalized != finalized_) {
    return absl::FailedPreconditionError(absl::StrCat(
        call, finalized ? ": call finalize first" : ": not allowed after finalize"));
  }
  return absl::OkStatus();
}

absl::Status Engine::SetDevice(std::unique_ptr<Device> device) {
  RETURN_IF_ERROR(Check(false, "set_device"));
  if (device == nullptr) return absl::InvalidArgumentError("set_device: null device");
  if (!params_.empty()) {
    return absl::FailedPreconditionError(
        "set_device: choose the device before registering params");
  }
  (void)stream_->Drain();
  device_ = std::move(device);
  ctx_.device = device_.get();
  return absl::OkStatus();
}

absl::StatusOr<int> Engine::RegisterParam(const ParamSpec& spec) {
  RETURN_IF_ERROR(Check(false, "register_param"));
  return params_.Register(spec);
}

absl::StatusOr<int64_t> Engine::ParamNumel(int id) const {
  RETURN_IF_ERROR(params_.CheckId(id, "param_numel"));
  return params_.at(id).numel;
}

absl::StatusOr<ParamSpec> Engine::ParamInfo(int id) const {
  RETURN_IF_ERROR(params_.CheckId(id, "param_info"));
  return params_.Info(id);
}

void Engine::ResolveAuto() {
  // hidden^2 (HF's "auto") for sizes that were "auto" or absent from the
  // ds_config, by the rule the memory estimator runs too.
  ResolveAutoSizes(params_.SizingParams(), &ctx_.config);
}

// offload_param "cpu" and its pin_memory move stage 3's shard off a GPU,
// offload_optimizer "cpu" the master and moments; where the state is host
// memory already they do nothing, which only the
// device tells (docs/DEEPSPEED_COMPAT.md): said here as the startup report
// says the other keys, or an error when untested keys are refused.
absl::Status Engine::ReportDeviceOnlyKeys() const {
  const std::vector<std::string>& k = ctx_.config.device_only_keys;
  if (k.empty() || !device_->host_accessible()) return absl::OkStatus();
  if (!ctx_.config.allow_untested_keys) {
    return absl::InvalidArgumentError(absl::StrCat(
        k[0], ": no effect on the ", device_->name(),
        " device (the state is in host memory already), and \"zero_allow_untested_keys\" is "
        "false (remove the key, or see docs/DEEPSPEED_COMPAT.md)"));
  }
  if (ctx_.rank == 0) {
    std::fprintf(stderr, "[zero] accepted without effect on the %s device: %s\n",
                 device_->name().c_str(), absl::StrJoin(k, ", ").c_str());
  }
  return absl::OkStatus();
}

absl::Status Engine::Finalize() {
  RETURN_IF_ERROR(Check(false, "finalize"));
  auto site = Site(ApiCall::kFinalize);
  RETURN_IF_ERROR(CheckCommDevicePair(*comm_, *device_));
  RETURN_IF_ERROR(ReportDeviceOnlyKeys());
  // The sub-groups of hybrid sharding and ZeRO++ come from the data
  // communicator (ncclCommSplit on a GPU); the staging path copies through
  // the host for the data communicator only, so a host communicator under a
  // GPU device has no way to run them.
  if ((hier_->active() || ctx_.config.quantized_weights) && !device_->host_accessible() &&
      !comm_->device_memory()) {
    return absl::UnimplementedError(absl::StrCat(
        "finalize: hybrid sharding and ZeRO++ (mics_shard_size, zero_hpz_partition_size, "
        "zero_quantized_weights/gradients) on the ", device_->name(),
        " device need a device communicator (NCCL), not the ", comm_->backend_name(),
        " communicator"));
  }
  if (comm_->device_memory()) hier_->set_wait_stream(device_->stream_handle());
  CommBinding b = BindCommToDevice(std::move(comm_), device_.get());
  comm_ = std::move(b.data);
  ctrl_owned_ = std::move(b.ctrl_owned);
  // comms_logger and zero_trace: every collective timed, counted as before.
  if (comm_log_ || (recorder_ && !ctx_.config.observe.trace_path.empty())) {
    const bool ctrl_is_data = b.ctrl == comm_.get();
    comm_ = MakeLoggingCommunicator(std::move(comm_), comm_log_.get(), recorder_.get());
    if (ctrl_is_data) b.ctrl = comm_.get();
  }
  ctx_.comm = comm_.get();
  ctx_.ctrl = b.ctrl;
  monitor_->set_param_namer([this](int64_t li) {
    return li >= 0 && li < static_cast<int64_t>(ctx_.layout.params().size())
               ? params_.by_layout(static_cast<int>(li)).name
               : std::string();
  });
  if (comm_->device_memory()) {
    monitor_->set_host_view([d = device_.get()](Communicator* inner) {
      return MakeDeviceControlCommunicator(inner, d);
    });
  }
  RETURN_IF_ERROR(ctx_.Fail(params_.VerifyRanksAgree(ctx_.ctrl, stream_.get())));
  ResolveAuto();
  ASSIGN_OR_RETURN(ctx_.placement, DecideOffloadPlacement(ctx_.config, device_->host_accessible(),
                                                          device_->name()));
  ctx_.layout = Layout(params_.AssignLayout(), ctx_.world, ctx_.config.sub_group_size);
  RETURN_IF_ERROR(CreateParts());
  RETURN_IF_ERROR(DeviceReady("finalize"));
  finalized_ = true;
  return absl::OkStatus();
}

// Allocates every part's state and fills it from the registered values,
// which are dropped afterwards.
absl::Status Engine::CreateParts() {
  sharded_ = std::make_unique<ShardedState>(&ctx_, &params_);
  RETURN_IF_ERROR(sharded_->Allocate());
  ASSIGN_OR_RETURN(store_, MakeOptimizerStateStore(&ctx_, sharded_.get()));
  const Layout& layout = ctx_.layout;
  RETURN_IF_ERROR(store_->Initialize([&](int g, int64_t a, int64_t b, const InitPiece& fn) {
    const GroupShard& gs = sharded_->group(g);
    for (int li : layout.groups()[g].members) {
      const ParamPlace& pl = layout.place(li);
      const int64_t lo = std::max(pl.offset, gs.owned_begin + a);
      const int64_t hi = std::min(pl.offset + pl.numel, gs.owned_begin + b);
      if (hi <= lo) continue;
      params_.ProduceInit(params_.by_layout(li), lo - pl.offset, hi - lo,
                          [&](int64_t done, int64_t n, const float* src) {
                            fn(lo - gs.owned_begin + done, n, src);
                          });
    }
  }));
  if (ctx_.stage() == 3) {
    coordinator_ = std::make_unique<ParamCoordinator>(&ctx_, &params_, sharded_.get());
    RETURN_IF_ERROR(coordinator_->AllocatePersistent());
  }
  // A failing fill callback fails finalize on every rank, naming the param.
  RETURN_IF_ERROR(ctx_.Fail(params_.AgreeInitErrors(ctx_.ctrl, stream_.get())));
  params_.DropInitValues();
  reducer_ = std::make_unique<GradientReducer>(&ctx_, &params_, sharded_.get());
  RETURN_IF_ERROR(reducer_->Allocate());
  boundary_->Wire(sharded_.get(), reducer_.get(), store_.get(), coordinator_.get());
  RETURN_IF_ERROR(boundary_->EnableMuon(MuonMatricesOf(params_, ctx_.layout)));
  checkpoint_ = std::make_unique<EngineCheckpoint>(&ctx_, &params_, sharded_.get(),
                                                   store_.get(), coordinator_.get(),
                                                   reducer_.get(), boundary_.get());
  return absl::OkStatus();
}

absl::StatusOr<void*> Engine::Gather(int id) {
  RETURN_IF_ERROR(Check(true, "gather"));
  auto site = Site(ApiCall::kGather);
  RETURN_IF_ERROR(params_.CheckId(id, "gather"));
  ParamRecord& p = params_.at(id);
  if (ctx_.recorder) ctx_.recorder->OnCall(false);
  void* data = nullptr;
  if (!p.trainable) {
    data = sharded_->Frozen(id);
  } else if (ctx_.stage() <= 2) {
    data = sharded_->WorkingPtr(p.li);
  } else {
    ScopedPhase exposed(ctx_.recorder, Phase::kGatherExposed);
    ASSIGN_OR_RETURN(data, coordinator_->Gather(id));
  }
  // The pointer is the caller's now: the update or gather that wrote it
  // must have run (a GPU computes asynchronously), and any device error
  // surfaces here.
  RETURN_IF_ERROR(DeviceReady("gather"));
  ++p.gather_refs;
  p.gathered_copies.push_back(p.trainable && ctx_.stage() == 3);
  return data;
}

absl::Status Engine::GatherInto(int id, DType dtype, void* dst, size_t bytes) {
  RETURN_IF_ERROR(Check(true, "gather_into"));
  auto site = Site(ApiCall::kGatherInto);
  RETURN_IF_ERROR(CheckGatherIntoArgs(id, dtype, dst, bytes));
  ParamRecord& p = params_.at(id);
  const size_t want = bytes;
  if (ctx_.recorder) ctx_.recorder->OnCall(false);
  if (!p.trainable) {
    device_->Copy(dst, sharded_->Frozen(id), want);
  } else if (ctx_.stage() <= 2) {
    // Stages 0-2 keep the param whole: a copy of the resident working copy,
    // so one caller code path serves every stage.
    device_->Copy(dst, sharded_->WorkingPtr(p.li), want);
  } else if (!device_->host_accessible()) {
    // The engine's collectives move device memory and `dst` may be host
    // memory: gathered into the engine's buffer (held until the release, as
    // Gather's), then copied (docs/ARCHITECTURE.md, "Stage 3").
    ScopedPhase exposed(ctx_.recorder, Phase::kGatherExposed);
    ASSIGN_OR_RETURN(void* data, coordinator_->Gather(id));
    device_->Copy(dst, data, want);
  } else {
    ScopedPhase exposed(ctx_.recorder, Phase::kGatherExposed);
    RETURN_IF_ERROR(coordinator_->GatherInto(id, dst));
  }
  RETURN_IF_ERROR(DeviceReady("gather_into"));
  ++p.gather_refs;
  p.gathered_copies.push_back(p.trainable);
  return absl::OkStatus();
}

absl::Status Engine::Release(int id) {
  RETURN_IF_ERROR(Check(true, "release"));
  auto site = Site(ApiCall::kRelease);
  RETURN_IF_ERROR(params_.CheckId(id, "release"));
  ParamRecord& p = params_.at(id);
  if (p.gather_refs <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("release '", p.name, "': not gathered"));
  }
  --p.gather_refs;
  p.gathered_copies.pop_back();
  if (ctx_.stage() == 3 && p.trainable) coordinator_->Release(id);
  return absl::OkStatus();
}

absl::StatusOr<void*> Engine::GradBuffer(int id) {
  RETURN_IF_ERROR(Check(true, "grad_buffer"));
  auto site = Site(ApiCall::kGradBuffer);
  RETURN_IF_ERROR(params_.CheckId(id, "grad_buffer"));
  if (!params_.at(id).trainable) {
    return absl::FailedPreconditionError(absl::StrCat(
        "grad_buffer '", params_.at(id).name, "': the param is frozen (trainable = 0)"));
  }
  if (ctx_.recorder) ctx_.recorder->OnCall(false);
  ScopedPhase exposed(ctx_.recorder, Phase::kReduceExposed);
  ASSIGN_OR_RETURN(void* g, reducer_->GradBuffer(id, boundary_->at_boundary()));
  // The slot's zero fill is queued on the device's stream; the caller writes
  // from its own stream or the host, so it must have landed first.
  RETURN_IF_ERROR(DeviceReady("grad_buffer"));
  return g;
}

absl::Status Engine::GradReady(int id) {
  RETURN_IF_ERROR(Check(true, "grad_ready"));
  auto site = Site(ApiCall::kGradReady);
  RETURN_IF_ERROR(params_.CheckId(id, "grad_ready"));
  if (ctx_.recorder) ctx_.recorder->OnCall(true);
  ScopedPhase exposed(ctx_.recorder, Phase::kReduceExposed);
  RETURN_IF_ERROR(reducer_->GradReady(id, boundary_->at_boundary()));
  absl::Status s = device_->status();
  if (!s.ok()) return DeviceReady("grad_ready");
  return absl::OkStatus();
}

absl::StatusOr<StepInfo> Engine::Step() {
  RETURN_IF_ERROR(Check(true, "step"));
  auto site = Site(ApiCall::kStep);
  const bool boundary = boundary_->at_boundary();
  // Before anything moves, so the caller may release and call step again.
  if (boundary) RETURN_IF_ERROR(CheckNoStaleCopies());
  if (ctx_.recorder) ctx_.recorder->OnStepEnter();
  {
    ScopedPhase drain(ctx_.recorder, Phase::kReduceDrain);
    RETURN_IF_ERROR(reducer_->FinishMicroStep(boundary));
  }
  if (coordinator_) coordinator_->EndMicroStep();
  auto info = boundary_->EndMicroStep();
  // A failed kernel makes the norm NaN, which alone would read as an fp16
  // overflow (a skipped step, forever in fp32/bf16): the device's error
  // comes first. The update has run when step returns.
  RETURN_IF_ERROR(DeviceReady("step"));
  if (!info.ok()) return ctx_.Fail(AfterFailedStep(info.status()));
  if (boundary) log_->MaybePrint(*info, boundary_->counters());
  if (ctx_.recorder) RecordStep(boundary);
  if (boundary && preemption_) {
    RETURN_IF_ERROR(preemption_->AtBoundary(boundary_->counters().global_step));
  }
  return info;
}

// A copy the caller holds across the optimizer step would keep the pre-step
// values: a port that gathers once and never releases would train on its
// starting weights at stage 3, silently. Gathers are collective and ranks
// gather alike, so every rank refuses alike (docs/ARCHITECTURE.md, "Stage 3").
absl::Status Engine::CheckNoStaleCopies() const {
  std::string held;
  int count = 0;
  for (const ParamRecord& p : params_.all()) {
    int copies = 0;
    for (bool c : p.gathered_copies) copies += c ? 1 : 0;
    if (copies == 0) continue;
    if (++count <= 8) absl::StrAppend(&held, count > 1 ? ", " : "", "'", p.name, "' (", copies, ")");
  }
  if (count == 0) return absl::OkStatus();
  if (count > 8) absl::StrAppend(&held, " and ", count - 8, " more");
  return absl::FailedPreconditionError(absl::StrCat(
      "step: ", count, " param(s) still gathered as a copy the optimizer step would leave "
      "stale (outstanding gathers in parentheses): ", held,
      ". Release them before the step that ends the accumulation and gather again after it "
      "(stage ", ctx_.stage(), ": ",
      ctx_.stage() == 3 ? "every gather is a copy" : "gather_into is a copy; gather is not",
      ")"));
}

// The crash rule (docs/ARCHITECTURE.md, "Offload"): state on NVMe is updated
// in place (one slot), so after a failed step it is neither the old step's
// nor the new one's; the engine refuses to go on and says where to resume.
absl::Status Engine::AfterFailedStep(const absl::Status& s) const {
  if (!ctx_.placement.any_nvme()) return s;
  return absl::Status(
      s.code(),
      absl::StrCat(s.message(), "; the step failed with state on NVMe, so this engine refuses "
                   "further calls: create a new engine and load the last checkpoint (",
                   ctx_.last_checkpoint.empty()
                       ? std::string("none was saved or loaded by this engine")
                       : absl::StrCat("this engine's last: ", ctx_.last_checkpoint),
                   ")"));
}

absl::Status Engine::DeviceReady(const char* call) {
  device_->Synchronize();
  const absl::Status s = device_->status();
  if (s.ok()) return s;
  return ctx_.Fail(absl::Status(
      s.code(), absl::StrCat(call, ": device ", device_->name(), " failed: ", s.message())));
}

void Engine::ReportSamples(int64_t n) { log_->ReportSamples(n); }

absl::Status Engine::CopyMemory(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError("copy: null pointer with bytes > 0");
  }
  RETURN_IF_ERROR(DeviceReady("copy"));
  device_->Copy(dst, src, bytes);
  return DeviceReady("copy");
}

// wall_clock_breakdown: the step's phases, printed on rank 0 every
// steps_per_print optimizer steps, after the progress line.
void Engine::RecordStep(bool boundary) {
  const StateStoreStats io = store_->stats();
  const StepCounters& c = boundary_->counters();
  const int64_t n = c.global_step + c.skipped_steps;
  if (!recorder_->OnStepExit(boundary, n, io.read_bytes, io.write_bytes)) return;
  const int every = ctx_.config.steps_per_print;
  if (recorder_->breakdown() && ctx_.rank == 0 && every > 0 && n % every == 0) {
    std::printf("%s", recorder_->FormatLast().c_str());
    std::fflush(stdout);
  }
}

EngineStats Engine::Stats() const {
  EngineParts parts;
  parts.ctx = &ctx_;
  parts.sharded = sharded_.get();
  parts.store = store_.get();
  parts.coordinator = coordinator_.get();
  parts.reducer = reducer_.get();
  parts.boundary = boundary_.get();
  return CollectStats(parts);
}

absl::Status Engine::Save(const std::string& dir, const std::string& tag,
                          const ckpt::SaveOptions& options_in) {
  RETURN_IF_ERROR(Check(true, "save"));
  auto site = Site(ApiCall::kSave);
  RETURN_IF_ERROR(AgreeOnCall());
  RETURN_IF_ERROR(LandDelayedUpdate("save"));
  ckpt::SaveOptions options = options_in;
  if (!options.progress) options.progress = ProgressFor(ctx_.progress, "save");
  if (ctx_.replicas <= 1) return checkpoint_->Save(dir, tag, options);
  if (options.async) {
    return absl::UnimplementedError(absl::StrCat(
        "save '", tag, "': async with hybrid sharding (mics_shard_size): "
        "save synchronously"));
  }
  // Hybrid sharding: the groups hold the same states; the first writes them
  // (a checkpoint of its world), and every rank learns how that went.
  absl::Status s;
  if (hier_->replica_index() == 0) s = checkpoint_->Save(dir, tag, options);
  float failed = s.ok() ? 0.0f : 1.0f;
  absl::Status agreed = stream_->Wait(stream_->Submit([&] {
    ScopedCountingKind k(hier_->replica(), CollectiveKind::kControl);
    return hier_->replica()->AllReduce(&failed, 1, ReduceOp::kMax);
  }));
  (void)stream_->Drain();
  RETURN_IF_ERROR(ctx_.Fail(agreed));
  if (!s.ok()) return s;
  if (failed != 0.0f) {
    return absl::InternalError(absl::StrCat(
        "save '", tag, "': the shard group that writes the checkpoint (replica 0) failed; "
        "see its ranks' errors"));
  }
  return absl::OkStatus();
}

absl::Status Engine::Load(const std::string& dir, const std::string& tag,
                          const ckpt::LoadOptions& options) {
  RETURN_IF_ERROR(Check(true, "load"));
  auto site = Site(ApiCall::kLoad);
  RETURN_IF_ERROR(AgreeOnCall());
  RETURN_IF_ERROR(LandDelayedUpdate("load"));
  if (options.progress || !ctx_.progress) return checkpoint_->Load(dir, tag, options);
  ckpt::LoadOptions o = options;
  o.progress = ProgressFor(ctx_.progress, "load");
  return checkpoint_->Load(dir, tag, o);
}

absl::Status Engine::WaitForCheckpoint() {
  if (!finalized_ || checkpoint_ == nullptr) return absl::OkStatus();
  return checkpoint_->WaitForSave();
}

absl::Status Engine::SetPreemption(const PreemptionOptions* options) {
  RETURN_IF_ERROR(Check(true, "set_preemption"));
  preemption_.reset();
  if (options == nullptr) return absl::OkStatus();
  // An async save in flight is joined first: its failure is said, and the
  // preemption save still goes ahead.
  auto save = [this](const std::string& dir, const std::string& tag) {
    const absl::Status earlier = WaitForCheckpoint();
    if (!earlier.ok()) {
      std::fprintf(stderr, "zero: rank %d: %s\n", ctx_.rank,
                   std::string(earlier.message()).c_str());
    }
    return Save(dir, tag);
  };
  ASSIGN_OR_RETURN(preemption_, Preemption::Install(&ctx_, *options, save));
  return absl::OkStatus();
}

ckpt::SaveTiming Engine::LastCheckpointTiming() const {
  return checkpoint_ == nullptr ? ckpt::SaveTiming() : checkpoint_->last_timing();
}

absl::Status Engine::LoadSafetensors(const std::string& path, const PretrainedOptions& options,
                                     PretrainedStats* stats) {
  RETURN_IF_ERROR(Check(true, "load_safetensors"));
  auto site = Site(ApiCall::kLoadSafetensors);
  RETURN_IF_ERROR(AgreeOnCall());
  RETURN_IF_ERROR(LandDelayedUpdate("load_safetensors"));
  absl::Status pre;
  if (boundary_->counters().micro_step != 0 || !reducer_->idle()) {
    pre = absl::FailedPreconditionError(
        "load_safetensors: gradients of an accumulation are pending; load right after the "
        "step() that ends it");
  }
  for (const ParamRecord& p : params_.all()) {
    if (pre.ok() && p.gather_refs > 0) {
      pre = absl::FailedPreconditionError(absl::StrCat(
          "load_safetensors: param '", p.name, "' is gathered; release every param first"));
    }
  }
  if (pre.ok() && coordinator_ != nullptr) coordinator_->FreeAll();  // would go stale
  PretrainedTargets t;
  t.ctx = &ctx_;
  t.params = &params_;
  t.sharded = sharded_.get();
  t.store = store_.get();
  t.coordinator = coordinator_.get();
  absl::Status s = ctx_.stream->Wait(ctx_.stream->Submit(
      [&]() -> absl::Status { return LoadPretrained(t, path, options, pre, stats); }));
  (void)ctx_.stream->Drain();
  return s;
}

}  // namespace zero
