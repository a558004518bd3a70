#include "core/engine/optimizer_boundary.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "core/common/status_macros.h"
#include "kernels/norm_math.h"

namespace zero {

OptimizerBoundary::OptimizerBoundary(EngineContext* ctx)
    : ctx_(ctx),
      scaler_(ctx->config.dtype == DType::kF16 && ctx->config.loss_scale == 0.0,
              ctx->config.loss_scale, ctx->config.initial_scale_power,
              ctx->config.loss_scale_window, ctx->config.hysteresis,
              ctx->config.consecutive_hysteresis, ctx->config.min_loss_scale),
      schedule_(ctx->config) {
  optimizer_ = MakeOptimizer(ctx->config);
}

int64_t OptimizerBoundary::scratch_bytes() const {
  int64_t n = 0;
  for (const DeviceBuffer& b : g32_) n += b.bytes();
  n += stream_raw_.bytes() + stream_f32_.bytes();
  if (pipeline_ != nullptr) n += pipeline_->buffer_bytes();
  return n;
}

absl::StatusOr<StepInfo> OptimizerBoundary::EndMicroStep() {
  if (!at_boundary()) {
    ++counters_.micro_step;
    StepInfo info;
    info.global_step = counters_.global_step;
    info.skipped_steps = counters_.skipped_steps;
    info.loss_scale = scaler_.scale();
    info.lr = schedule_.LrForStep(counters_.global_step);
    return info;
  }
  counters_.micro_step = 0;
  return Step();
}

absl::StatusOr<StepInfo> OptimizerBoundary::Step() {
  ASSIGN_OR_RETURN(GradPlan plan, PlanGrads());
  ASSIGN_OR_RETURN(const double sumsq, ReduceAndNorm(&plan));
  StepInfo info;
  info.boundary = true;
  const double scale = scaler_.scale();
  const bool overflow = !std::isfinite(sumsq);
  const double scaled_norm = std::sqrt(sumsq);
  info.grad_norm = overflow ? std::numeric_limits<double>::infinity() : scaled_norm / scale;
  info.lr = schedule_.LrForStep(counters_.global_step);
  if (overflow) return SkipStep(info);
  const float factor = static_cast<float>(
      math::UnscaleClipFactor(scaled_norm, scale, ctx_->config.gradient_clipping));
  // Muon's matrices: their update ready before pass 2, written over
  // pass 2's after it (core/engine/muon_phase.h).
  if (muon_ != nullptr) RETURN_IF_ERROR(muon_->Prepare(MuonGrads(plan), factor, info.lr));
  RETURN_IF_ERROR(
      UpdateState(plan, optimizer_->Scalars(info.lr, counters_.global_step + 1, factor)));
  if (muon_ != nullptr) RETURN_IF_ERROR(muon_->Commit());
  return FinishStep(plan, info);
}

absl::StatusOr<OptimizerBoundary::GradPlan> OptimizerBoundary::PlanGrads() {
  Device* device = ctx_->device;
  const DType t = ctx_->dtype();
  const int groups = sharded_->num_groups();
  GradPlan p;
  // Two passes over the owned gradients (docs/ARCHITECTURE.md, "One
  // training step"). Pass 1 reads them once for the sum of squares (norm and
  // overflow together); pass 2 is the fused update, which reads them raw
  // (cast per tile) and zeroes them. Stage 1's owned gradients are the fp32
  // scratch its reduce-scatter writes (the full local gradient is zeroed as
  // the pack reads it), unless that reduce-scatter is the identity (one
  // rank, nothing to scale): then they are the gradients, as at stages 2-3.
  // A device without the fused update, or fused off (EnginePaths), casts into the
  // scratch, updates from it and zeroes afterwards; so does a host store
  // apart from the device (the delayed update on the CPU device), which
  // takes fp32 gradients.
  p.fused = device->fused_update() && ctx_->config.engine_paths.fused_boundary &&
            store_->memory_device() == device;
  p.scatter = ctx_->stage() == 1 && !reducer_->Stage1IsIdentity();
  p.in_place = t == DType::kF32 && !p.scatter;
  p.raw = !p.scatter && (p.in_place || p.fused);
  // Stage 3 with offload_optimizer "nvme" (ZeRO-Infinity): the gradient
  // shards are in files and stream group by group through one raw buffer
  // (and an fp32 one when not fused), read for pass 1 and again for pass
  // 2, with the same kernels on the same elements in the same order: the
  // bits do not depend on where the gradients live.
  p.streamed = sharded_->grads_on_nvme();
  if (p.streamed && stream_raw_.bytes() == 0) {
    int64_t most = 1;
    for (int g = 0; g < groups; ++g) most = std::max(most, sharded_->group(g).owned_len);
    ASSIGN_OR_RETURN(stream_raw_, DeviceBuffer::Make(device, most * ctx_->es()));
    ASSIGN_OR_RETURN(stream_f32_, DeviceBuffer::Make(device, most * 4));
  }
  // Stage 1 with fp32 gradients: the reduce-scatter's fp32 target is the
  // rank's own owned range of the full local gradient (read for the last
  // time as it is packed), not a scratch of the owned size, unless that
  // reduce-scatter reads the gradient unpacked (GradientReducer::
  // Stage1ReadsGrads). Only when the update runs here on the device (not
  // ZeRO-Offload's host store, which neither reads it in place nor zeroes
  // it): pass 2 zeroes it as it reads it, as at stages 2-3.
  p.in_grads.assign(groups, 0);
  for (int g = 0; g < groups && p.scatter && t == DType::kF32; ++g) {
    p.in_grads[g] = store_->memory_device() == device && !reducer_->Stage1ReadsGrads(g);
  }
  if (!p.raw && !p.streamed && g32_.empty()) {
    g32_.resize(groups);
    for (int g = 0; g < groups; ++g) {
      if (p.in_grads[g]) continue;
      ASSIGN_OR_RETURN(g32_[g], DeviceBuffer::Make(device, sharded_->group(g).owned_len * 4));
    }
  }
  // Pass 1's source and pass 2's gradients: raw (dtype t) or fp32 scratch.
  p.src.assign(groups, nullptr);
  p.src_t = p.raw ? t : DType::kF32;
  p.g32.assign(groups, nullptr);
  for (int g = 0; g < groups && !p.streamed; ++g) {
    const GroupShard& gs = sharded_->group(g);
    p.src[g] = p.raw        ? gs.grads.data()
               : p.in_grads[g] ? gs.grads.data<char>() + gs.owned_begin * 4
                               : g32_[g].data();
    if (!p.raw || p.in_place) p.g32[g] = static_cast<float*>(p.src[g]);
  }
  return p;
}

absl::StatusOr<double> OptimizerBoundary::ReduceAndNorm(GradPlan* plan) {
  Device* device = ctx_->device;
  const DType t = ctx_->dtype();
  const int stage = ctx_->stage();
  const int world = ctx_->world;
  const int groups = sharded_->num_groups();
  GradPlan& p = *plan;
  double sumsq = 0.0;
  float post_scale = 1.0f;  // stage 1's averaging, applied in pass 1
  auto reduce = [&]() -> absl::Status {
    if (stage == 0 && world > 1) {
      ScopedPhase timer(ctx_->recorder, Phase::kBoundaryReduce);
      RETURN_IF_ERROR(reducer_->ReduceLeftoversStage0());
    }
    if (p.scatter) {
      ScopedPhase timer(ctx_->recorder, Phase::kBoundaryReduce);
      RETURN_IF_ERROR(
          reducer_->ReduceScatterFlatStage1(p.g32, /*zero_grads=*/p.fused, &post_scale));
    }
    ScopedPhase norm(ctx_->recorder, Phase::kNorm);
    if (p.streamed) {
      // The reducer's gradient writes, behind until here (a failed one
      // names its file and ends the step before any state moves).
      RETURN_IF_ERROR(sharded_->FlushGradWrites());
      for (int g = 0; g < groups; ++g) {
        const int64_t n = sharded_->group(g).owned_len;
        RETURN_IF_ERROR(sharded_->ReadGradsRaw(g, 0, n, stream_raw_.data()));
        sumsq += device->SumSquares(stream_raw_.data(), t, n);
      }
    } else if (!p.scatter && !p.raw) {
      for (int g = 0; g < groups; ++g) {
        device->ToF32(sharded_->group(g).grads.data(), t, p.g32[g], sharded_->group(g).owned_len,
                      1.0f);
      }
    }
    // Same elements, same order and precision as a sum over the fp32 cast
    // (float(x) * 1.0f is x): the norm's bits do not depend on the path.
    // Stage 1's averaging scale goes into the same pass (scaled in place
    // tile by tile, then squared): the same bits as a pass of its own.
    for (int g = 0; g < groups && !p.streamed; ++g) {
      const int64_t n = sharded_->group(g).owned_len;
      sumsq += post_scale != 1.0f ? device->ScaleSumSquares(p.g32[g], n, post_scale)
                                  : device->SumSquares(p.src[g], p.src_t, n);
    }
    // Norm and overflow in one all-reduce: a non-finite gradient anywhere
    // makes the global sum of squares non-finite.
    if (stage >= 1 && world > 1) {
      ScopedCountingKind k(ctx_->ctrl, CollectiveKind::kControl);
      RETURN_IF_ERROR(ctx_->ctrl->AllReduce(&sumsq, 1, ReduceOp::kSum));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ctx_->stream->Wait(ctx_->stream->Submit(reduce)));
  (void)ctx_->stream->Drain();
  return sumsq;
}

absl::StatusOr<StepInfo> OptimizerBoundary::SkipStep(StepInfo info) {
  sharded_->ZeroGrads();
  RETURN_IF_ERROR(LandDelayedUpdate());
  RETURN_IF_ERROR(scaler_.Update(true));
  ++counters_.skipped_steps;
  info.skipped = true;
  info.global_step = counters_.global_step;
  info.skipped_steps = counters_.skipped_steps;
  info.loss_scale = scaler_.scale();
  return info;
}

absl::Status OptimizerBoundary::StepPiece(const GradPlan& plan, const math::OptimScalars& scalars,
                                          int g, int64_t begin, int64_t len, float* master,
                                          float* s1, float* s2, char* work, bool piped) {
  Device* device = ctx_->device;
  const DType t = ctx_->dtype();
  void* grad = nullptr;
  DType gt = DType::kF32;
  bool zero = false;
  if (plan.streamed) {
    // Pass 2 from the gradient file: this piece, raw.
    void* raw_grads = stream_raw_.data();
    if (piped) {
      ASSIGN_OR_RETURN(raw_grads, pipeline_->Grads(g, begin, len));
    } else {
      RETURN_IF_ERROR(sharded_->ReadGradsRaw(g, begin, len, raw_grads));
    }
    grad = raw_grads;
    gt = t;
    if (!plan.fused) {
      device->ToF32(raw_grads, t, stream_f32_.data<float>(), len, 1.0f);
      grad = stream_f32_.data();
      gt = DType::kF32;
    }
  } else if (plan.fused) {
    // Pass 2: raw gradients in, zeroed once read (stage 1's scratch
    // needs no zeroing: the next reduce-scatter overwrites it; its owned
    // range of the gradient does).
    grad = static_cast<char*>(plan.src[g]) + begin * DTypeSize(plan.src_t);
    gt = plan.src_t;
    zero = !plan.scatter || plan.in_grads[g];
  } else {
    grad = plan.g32[g] + begin;
  }
  device->OptimizerStep(scalars, grad, gt, master, s1, s2, len, work, t, zero);
  return absl::OkStatus();
}

absl::Status OptimizerBoundary::UpdateState(const GradPlan& plan,
                                            const math::OptimScalars& scalars) {
  Device* device = ctx_->device;
  const Config& c = ctx_->config;
  const int world = ctx_->world;
  OptimizerUpdate u;
  u.grads = &plan.g32;
  u.scalars = scalars;
  // With offload_param "nvme" the working copy goes through `staged` to the
  // next slot of the group's param file, in sub_group_size pieces.
  // With offload_param "cpu" on a device, the kernels write the updated
  // working copy into `staged_dev` (device memory), copied down to the host
  // shard piece by piece.
  const size_t es = ctx_->es();
  const bool staged_working = sharded_->params_on_nvme();
  const bool host_working = sharded_->params_on_host();
  std::vector<char> staged;
  DeviceBuffer staged_dev;
  u.piece = staged_working || host_working ? std::max<int64_t>(1, c.sub_group_size)
                                           : std::numeric_limits<int64_t>::max();
  // A param file with a GPU: the kernels write device staging, copied down
  // to `staged` for the file.
  const bool device_staged = host_working || (staged_working && sharded_->shard_on_host());
  auto land = [&](int g, int64_t begin, int64_t len, char* work) -> absl::Status {
    if (staged_working) {
      if (device_staged) {
        sharded_->PutOwned(staged.data(), work, len);
        work = staged.data();
      }
      return sharded_->param_file(g)->Write(begin * es, len * es, work);
    }
    if (host_working) sharded_->PutOwned(sharded_->OwnedWorking(g, begin), work, len);
    return absl::OkStatus();
  };
  // Stage 3 streamed (gradients, and maybe working params, in files): the
  // gradient reads ahead and the param-file writes behind run on IO threads
  // while the caller updates, alongside the tier's own optimizer-state
  // pipeline (core/engine/update_io_pipeline.h: the blocking ones were the
  // update's exposed IO). EnginePaths can turn it off.
  std::vector<UpdatePiece> order;
  if (plan.streamed && !device_staged && c.engine_paths.update_io_pipeline) order = store_->UpdateOrder();
  const bool piped = !order.empty();
  if (piped) {
    if (pipeline_ == nullptr) {
      int64_t piece = 1;
      for (const UpdatePiece& p : order) piece = std::max(piece, p.len);
      pipeline_ = std::make_unique<UpdateIoPipeline>(
          sharded_, device, es, c.offload_optimizer.buffer_count, piece);
    }
    RETURN_IF_ERROR(pipeline_->Begin(std::move(order), staged_working));
  }
  u.on_device = [&](int g, int64_t begin, int64_t len, float* master, float* s1,
                    float* s2) -> absl::Status {
    char* work = nullptr;
    if (piped && staged_working) {
      ASSIGN_OR_RETURN(work, pipeline_->WorkBuffer());
    } else {
      work = sharded_->OwnedWorking(g, begin);
      if (staged_working) {
        staged.resize(len * es);
        work = staged.data();
      }
    }
    // An fp32 master that is the working copy's owned range
    // (DeviceStateStore::Allocate): the update writing the master writes
    // the working copy; no second write of the same values.
    if (work == reinterpret_cast<char*>(master)) work = nullptr;
    if (device_staged) {
      if (staged_dev.bytes() < static_cast<size_t>(len) * es) {
        ASSIGN_OR_RETURN(staged_dev, DeviceBuffer::Make(device, len * es));
      }
      work = staged_dev.data<char>();
    }
    RETURN_IF_ERROR(StepPiece(plan, u.scalars, g, begin, len, master, s1, s2, work, piped));
    if (plan.streamed && piped && staged_working) {
      pipeline_->Land(g, begin, len);  // written behind; errors at Finish
      return absl::OkStatus();
    }
    return land(g, begin, len, work);
  };
  bool agreed = false;
  absl::Status piped_io;  // the pipeline's first error, known before agreeing
  u.agree = [&](bool ok) -> absl::StatusOr<bool> {
    agreed = true;
    if (piped) {
      piped_io = pipeline_->Finish();  // every write landed (or failed) first
      ok = ok && piped_io.ok();
    }
    if (world == 1) return ok;
    double failed = ok ? 0.0 : 1.0;
    RETURN_IF_ERROR(ctx_->stream->Wait(ctx_->stream->Submit([&] {
      ScopedCountingKind k(ctx_->ctrl, CollectiveKind::kControl);
      return ctx_->ctrl->AllReduce(&failed, 1, ReduceOp::kMax);
    })));
    (void)ctx_->stream->Drain();
    return failed == 0.0;
  };
  absl::Status updated;
  {
    ScopedPhase timer(ctx_->recorder, Phase::kUpdate);
    updated = store_->Update(u);
  }
  if (piped) {
    // Nothing in flight past here. A failed gradient read or param write
    // is the cause: the tier, told only that the step did not agree, says
    // "another rank failed".
    if (piped_io.ok()) piped_io = pipeline_->Finish();
    if (!piped_io.ok() && (updated.ok() || updated.code() == absl::StatusCode::kAborted)) {
      updated = piped_io;
    }
  }
  if (!agreed && staged_working) {
    // A store in memory does not agree; a param file's write may still
    // have failed here: every rank learns it before the publishing
    // collectives, instead of waiting for the timeout there.
    ASSIGN_OR_RETURN(const bool all, u.agree(updated.ok()));
    if (updated.ok() && !all) {
      updated = absl::AbortedError(
          "offload_param nvme: another rank failed writing its working params");
    }
  }
  return updated;
}

absl::StatusOr<StepInfo> OptimizerBoundary::FinishStep(const GradPlan& plan, StepInfo info) {
  sharded_->CommitParamFiles();
  if (!plan.fused || plan.streamed) sharded_->ZeroGrads();
  RETURN_IF_ERROR(ctx_->stream->Wait(ctx_->stream->Submit([this] { return PublishWorkingCopy(); })));
  (void)ctx_->stream->Drain();
  RETURN_IF_ERROR(scaler_.Update(false));
  ++counters_.global_step;
  info.global_step = counters_.global_step;
  info.skipped_steps = counters_.skipped_steps;
  info.loss_scale = scaler_.scale();
  return info;
}

absl::Status OptimizerBoundary::LandDelayedUpdate() {
  ASSIGN_OR_RETURN(const bool landed, store_->LandDelayed());
  if (!landed) return absl::OkStatus();
  RETURN_IF_ERROR(ctx_->stream->Wait(ctx_->stream->Submit([this] { return PublishWorkingCopy(); })));
  (void)ctx_->stream->Drain();
  return absl::OkStatus();
}

absl::Status OptimizerBoundary::PublishWorkingCopy() {
  ScopedPhase timer(ctx_->recorder, Phase::kPublish);
  RETURN_IF_ERROR(sharded_->AllGatherWorking());
  if (coordinator_ != nullptr) RETURN_IF_ERROR(coordinator_->RefreshPersistent());
  return absl::OkStatus();
}

}  // namespace zero
