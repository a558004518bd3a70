#include "core/engine/engine_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ckpt/agree.h"
#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/checkpoint_writer.h"
#include "core/ckpt/file_util.h"
#include "core/ckpt/manifest.h"
#include "core/ckpt/snapshot.h"
#include "core/common/status_macros.h"
#include "core/optim/optimizer.h"

namespace zero {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

absl::Status EngineCheckpoint::Precondition(const char* call) {
  if (!reducer_->idle()) {
    return absl::FailedPreconditionError(absl::StrCat(
        call, ": gradients of the next micro-step were already handed in; "
        "call it right after the step() that ends an accumulation"));
  }
  return absl::OkStatus();
}

ckpt::ShardView EngineCheckpoint::MakeShardView() {
  const Config& c = ctx_->config;
  ckpt::ShardView v;
  v.device = ctx_->device;
  v.state_device = store_->memory_device();
  v.rank = ctx_->rank;
  v.world = ctx_->world;
  v.stage = c.stage;
  v.dtype = c.dtype;
  v.config = &ctx_->config;
  // The optimizer's moments, arrays 1.. of the store, by section name.
  std::vector<int> array_of(ckpt::kNumStates, -1);
  array_of[ckpt::kMaster] = 0;
  {
    const std::vector<const char*> moments = MakeOptimizer(c)->moments();
    for (size_t a = 0; a < moments.size(); ++a) {
      const int kind = ckpt::StateFromName(moments[a]);
      v.states.push_back(kind);
      array_of[kind] = static_cast<int>(a) + 1;
    }
  }
  const StepCounters& n = boundary_->counters();
  v.global_step = n.global_step;
  v.skipped_steps = n.skipped_steps;
  v.micro_step = n.micro_step;
  v.scaler_dynamic = boundary_->scaler().dynamic();
  v.scaler = boundary_->scaler().state();
  auto at = [](float* base, int64_t i) { return base ? base + i : nullptr; };
  for (int id = 0; id < params_->size(); ++id) {
    const ParamRecord& p = params_->at(id);
    ckpt::ParamView pv;
    pv.name = p.name;
    pv.shape = p.shape;
    pv.dtype = p.dtype;
    pv.numel = p.numel;
    pv.trainable = p.trainable;
    if (!p.trainable) {
      pv.whole = sharded_->Frozen(id);
      v.params.push_back(std::move(pv));
      continue;
    }
    const ParamPlace& pl = ctx_->layout.place(p.li);
    const GroupShard& gs = sharded_->group(pl.group);
    const int64_t lo = std::max(pl.offset, gs.owned_begin);
    const int64_t hi = std::min(pl.offset + p.numel, gs.owned_begin + gs.owned_len);
    if (hi > lo) {
      pv.own_offset = lo - pl.offset;
      pv.own_numel = hi - lo;
      const int64_t i = lo - gs.owned_begin;
      pv.state[ckpt::kMaster] = at(store_->InMemory(pl.group, 0), i);
      for (int kind : v.states) pv.state[kind] = at(store_->InMemory(pl.group, array_of[kind]), i);
      if (pv.state[ckpt::kMaster] == nullptr) {
        // State on NVMe: streamed through the store (bounded buffers).
        OptimizerStateStore* store = store_;
        const int g = pl.group;
        pv.io = [store, g, i, array_of](int kind, int64_t at_i, int64_t n, float* data,
                                        bool write) -> absl::Status {
          const int array = array_of[kind];
          return write ? store->Write(g, array, i + at_i, n, data)
                       : store->Read(g, array, i + at_i, n, data);
        };
      }
    }
    for (int r = 0; r < ctx_->world; ++r) {
      const Slice s = ctx_->layout.SliceOn(p.li, r);
      if (s.numel > 0) pv.slices.push_back({r, s.param_offset, s.numel});
    }
    v.params.push_back(std::move(pv));
  }
  return v;
}

absl::Status EngineCheckpoint::RebuildWorkingFromMaster() {
  const size_t es = ctx_->es();
  for (int g = 0; g < sharded_->num_groups(); ++g) {
    GroupShard& gs = sharded_->group(g);
    if (sharded_->params_on_nvme()) {  // offload_param "nvme": the shard is on disk
      std::vector<char> cast(gs.owned_len * es);
      if (sharded_->shard_on_host()) {  // a GPU: cast on the device, then down
        ASSIGN_OR_RETURN(DeviceBuffer dev, DeviceBuffer::Make(ctx_->device,
                                                              std::max<size_t>(1, cast.size())));
        RETURN_IF_ERROR(store_->CastMaster(g, dev.data()));
        sharded_->PutOwned(cast.data(), dev.data(), gs.owned_len);
      } else {
        RETURN_IF_ERROR(store_->CastMaster(g, cast.data()));
      }
      RETURN_IF_ERROR(sharded_->param_file(g)->WriteCommitted(0, gs.owned_len * es, cast.data()));
    } else if (sharded_->params_on_host()) {  // offload_param "cpu" on a device
      ASSIGN_OR_RETURN(DeviceBuffer cast,
                       DeviceBuffer::Make(ctx_->device, std::max<size_t>(1, gs.owned_len * es)));
      RETURN_IF_ERROR(store_->CastMaster(g, cast.data()));
      sharded_->PutOwned(sharded_->OwnedWorking(g, 0), cast.data(), gs.owned_len);
    } else {
      RETURN_IF_ERROR(store_->CastMaster(g, sharded_->OwnedWorking(g, 0)));
    }
  }
  sharded_->ZeroGrads();
  ctx_->device->Synchronize();
  return boundary_->PublishWorkingCopy();
}

std::string EngineCheckpoint::Describe(const std::string& dir, const std::string& tag) const {
  return absl::StrCat("'", ckpt::JoinPath(dir, tag), "' (global step ",
                      boundary_->counters().global_step, ")");
}

ckpt::SaveTiming EngineCheckpoint::last_timing() const {
  ckpt::SaveTiming t = timing_;
  t.write_seconds = saver_.last_write_seconds();
  return t;
}

absl::Status EngineCheckpoint::WaitForSave() {
  if (!saver_.pending()) return absl::OkStatus();
  const absl::Status s = saver_.Wait();
  if (absl::IsDeadlineExceeded(s) || absl::IsAborted(s)) return ctx_->Fail(s);
  if (s.ok()) ctx_->last_checkpoint = in_flight_;
  return s;
}

absl::Status EngineCheckpoint::Save(const std::string& dir, const std::string& tag,
                                    const ckpt::SaveOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(WaitForSave());
  timing_ = ckpt::SaveTiming();
  if (options.async) {
    absl::Status s = SaveAsync(dir, tag, options);
    timing_.blocking_seconds = SecondsSince(t0);
    return s;
  }
  absl::Status pre = Precondition("save");
  if (pre.ok()) pre = store_->Materialize();
  absl::Status s = ctx_->stream->Wait(ctx_->stream->Submit([&]() -> absl::Status {
    RETURN_IF_ERROR(ckpt::Agree(ctx_->ctrl, pre));
    return ckpt::SaveCheckpoint(MakeShardView(), ctx_->ctrl, dir, tag, options);
  }));
  (void)ctx_->stream->Drain();
  (void)store_->Spill(false);
  timing_.blocking_seconds = SecondsSince(t0);
  if (absl::IsDeadlineExceeded(s) || absl::IsAborted(s)) return ctx_->Fail(s);
  if (s.ok()) ctx_->last_checkpoint = Describe(dir, tag);
  return s;
}

absl::Status EngineCheckpoint::SaveAsync(const std::string& dir, const std::string& tag,
                                         const ckpt::SaveOptions& options) {
  // What the background would only find later is refused now, on every rank.
  absl::Status pre = Precondition("save");
  if (pre.ok()) pre = ckpt::CheckTagName(tag);
  const int64_t micro = boundary_->counters().micro_step;
  if (pre.ok() && micro != 0) {
    pre = absl::FailedPreconditionError(absl::StrCat(
        "save: in the middle of gradient accumulation (micro-step ", micro,
        "); save after the step() that ends an accumulation"));
  }
  if (pre.ok()) pre = store_->Materialize();
  absl::StatusOr<ckpt::ShardView> snap;
  absl::Status s = ctx_->stream->Wait(ctx_->stream->Submit([&]() -> absl::Status {
    RETURN_IF_ERROR(ckpt::Agree(ctx_->ctrl, pre));
    if (save_comm_ == nullptr) {
      ASSIGN_OR_RETURN(save_comm_, ctx_->ctrl->Duplicate());
      save_comm_->set_timeout_seconds(ctx_->ctrl->timeout_seconds());
    }
    const auto t0 = std::chrono::steady_clock::now();
    snap = ckpt::TakeSnapshot(ckpt::SavedView(MakeShardView(), options), saver_.buffer());
    timing_.snapshot_seconds = SecondsSince(t0);
    return ckpt::Agree(ctx_->ctrl, snap.status());
  }));
  (void)ctx_->stream->Drain();
  (void)store_->Spill(false);
  if (absl::IsDeadlineExceeded(s) || absl::IsAborted(s)) return ctx_->Fail(s);
  RETURN_IF_ERROR(s);
  // The progress callback belongs to the call (a binding clears it when
  // the call returns): the background write reports none.
  ckpt::SaveOptions bg = options;
  bg.progress = nullptr;
  in_flight_ = Describe(dir, tag);
  saver_.Start(*std::move(snap), save_comm_.get(), dir, tag, std::move(bg), in_flight_);
  return absl::OkStatus();
}

absl::Status EngineCheckpoint::Load(const std::string& dir, const std::string& tag,
                                    const ckpt::LoadOptions& options) {
  RETURN_IF_ERROR(WaitForSave());
  absl::Status pre = Precondition("load");
  const int64_t micro = boundary_->counters().micro_step;
  if (pre.ok() && micro != 0) {
    pre = absl::FailedPreconditionError(absl::StrCat(
        "load: in the middle of gradient accumulation (micro-step ", micro,
        "); load right after the step() that ends an accumulation"));
  }
  for (const ParamRecord& p : params_->all()) {
    if (pre.ok() && p.gather_refs > 0) {
      pre = absl::FailedPreconditionError(absl::StrCat(
          "load: param '", p.name, "' is gathered; release every param first"));
    }
  }
  if (pre.ok()) pre = store_->Materialize();
  // Stage 3: prefetched copies would go stale.
  if (pre.ok() && coordinator_ != nullptr) coordinator_->FreeAll();
  bool touched = false;
  absl::Status s = ctx_->stream->Wait(ctx_->stream->Submit([&]() -> absl::Status {
    RETURN_IF_ERROR(ckpt::Agree(ctx_->ctrl, pre));
    ASSIGN_OR_RETURN(ckpt::Manifest m, ckpt::LoadCheckpoint(MakeShardView(), ctx_->ctrl, dir,
                                                            tag, options, &touched));
    boundary_->set_steps(m.global_step, m.skipped_steps);
    LossScaler& scaler = boundary_->scaler();
    if (scaler.dynamic() == m.scaler_dynamic) {
      LossScalerState st = m.scaler;
      if (!scaler.dynamic()) st.cur_scale = scaler.scale();  // static: the config's
      scaler.set_state(st);
    }
    return ckpt::Agree(ctx_->ctrl, RebuildWorkingFromMaster());
  }));
  (void)ctx_->stream->Drain();
  {
    const absl::Status spill = store_->Spill(s.ok());
    if (s.ok() && !spill.ok()) {
      return ctx_->Fail(absl::Status(spill.code(), absl::StrCat(
          "load: writing the loaded optimizer state to NVMe failed: ", spill.message())));
    }
  }
  if (!s.ok() && (touched || absl::IsDeadlineExceeded(s) || absl::IsAborted(s))) {
    return ctx_->Fail(absl::Status(s.code(), absl::StrCat(
        s.message(), touched ? " (the engine's state was partly overwritten: "
                               "create a new engine to load again)" : "")));
  }
  if (s.ok()) {
    ctx_->last_checkpoint = absl::StrCat("'", ckpt::JoinPath(dir, tag.empty() ? "latest" : tag),
                                         "' (global step ", boundary_->counters().global_step,
                                         ")");
  }
  return s;
}

}  // namespace zero
