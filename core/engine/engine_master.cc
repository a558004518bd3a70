// The engine's owned state read and written from outside a step: the fp32
// master of a param (read_master, write_master, write_master_range) and the
// owned slices of the optimizer state (ReadOwnedState / WriteOwnedState).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/engine/engine.h"
#include "core/engine/optimizer_state_store.h"
#include "core/engine/param_coordinator.h"
#include "core/engine/sharded_state.h"

namespace zero {

absl::Status Engine::CheckOwnedRange(int g, int array, int64_t begin, int64_t len,
                                     const char* call) const {
  if (g < 0 || g >= sharded_->num_groups() || begin < 0 || len < 0 ||
      begin + len > sharded_->group(g).owned_len || array < 0 || array > 2) {
    return absl::InvalidArgumentError(absl::StrCat(call, ": range out of bounds"));
  }
  return absl::OkStatus();
}

absl::Status Engine::ReadOwnedState(int g, int array, int64_t begin, int64_t len,
                                    float* out) {
  RETURN_IF_ERROR(Check(true, "read_owned_state"));
  RETURN_IF_ERROR(CheckOwnedRange(g, array, begin, len, "read_owned_state"));
  return store_->Read(g, array, begin, len, out);
}

absl::Status Engine::WriteOwnedState(int g, int array, int64_t begin, int64_t len,
                                     const float* in) {
  RETURN_IF_ERROR(Check(true, "write_owned_state"));
  RETURN_IF_ERROR(CheckOwnedRange(g, array, begin, len, "write_owned_state"));
  return store_->Write(g, array, begin, len, in);
}

absl::Status Engine::ReadMaster(int id, float* out) {
  RETURN_IF_ERROR(Check(true, "read_master"));
  auto site = Site(ApiCall::kReadMaster);
  RETURN_IF_ERROR(params_.CheckId(id, "read_master"));
  if (out == nullptr) return absl::InvalidArgumentError("read_master: out is null");
  const ParamRecord& p = params_.at(id);
  if (!p.trainable) {
    device_->DownloadF32(sharded_->Frozen(id), p.dtype, out, p.numel);
    return absl::OkStatus();
  }
  const ParamPlace& pl = ctx_.layout.place(p.li);
  if (ctx_.stage() == 0) return ctx_.Fail(store_->Read(pl.group, 0, pl.offset, p.numel, out));
  // Gather into device memory (collectives move device buffers), then copy.
  ASSIGN_OR_RETURN(DeviceBuffer full, DeviceBuffer::Make(device_.get(), p.numel * 4));
  const Slice s = ctx_.layout.SliceOn(p.li, ctx_.rank);
  DeviceBuffer scratch;
  ASSIGN_OR_RETURN(const float* send,
                   store_->MasterOnDevice(pl.group, s.shard_offset, s.numel, &scratch));
  auto counts = ctx_.layout.Counts(p.li);
  float* dst = full.data<float>();
  RETURN_IF_ERROR(ctx_.Fail(stream_->Wait(stream_->Submit([&] {
    ScopedCountingKind k(comm_.get(), CollectiveKind::kControl);
    return comm_->AllGatherV(send, dst, counts, DType::kF32);
  }))));
  (void)stream_->Drain();
  device_->DownloadF32(dst, DType::kF32, out, p.numel);
  return absl::OkStatus();
}

absl::Status Engine::CheckWritable(int id, const float* values, const char* what) {
  RETURN_IF_ERROR(Check(true, what));
  RETURN_IF_ERROR(params_.CheckId(id, what));
  if (values == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": values is null"));
  const ParamRecord& p = params_.at(id);
  if (p.gather_refs > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " '", p.name, "': the param is gathered; release it first"));
  }
  if (boundary_->counters().micro_step != 0 || !reducer_->idle()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " '", p.name, "': gradients of an accumulation are pending; "
        "write right after the step() that ends it"));
  }
  return absl::OkStatus();
}

absl::Status Engine::LandDelayedUpdate(const char* call) {
  if (!ctx_.config.offload_optimizer.delayed_update) return absl::OkStatus();
  const int64_t micro = boundary_->counters().micro_step;
  if (micro != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        call, ": in the middle of gradient accumulation (micro-step ", micro,
        ") with offload_optimizer.delayed_update, whose update in flight lands first; call it "
        "after the step() that ends an accumulation"));
  }
  return ctx_.Fail(boundary_->LandDelayedUpdate());
}

absl::Status Engine::WriteMaster(int id, const float* values) {
  RETURN_IF_ERROR(CheckWritable(id, values, "write_master"));
  const ParamRecord& p = params_.at(id);
  if (!p.trainable) {
    sharded_->WriteFrozen(id, values);
    return absl::OkStatus();
  }
  const ParamPlace& pl = ctx_.layout.place(p.li);
  const GroupShard& gs = sharded_->group(pl.group);
  const int64_t lo = std::max(pl.offset, gs.owned_begin);
  const int64_t hi = std::min(pl.offset + p.numel, gs.owned_begin + gs.owned_len);
  if (hi > lo) {
    RETURN_IF_ERROR(ctx_.Fail(store_->Write(pl.group, 0, lo - gs.owned_begin, hi - lo,
                                            values + (lo - pl.offset))));
  }
  RETURN_IF_ERROR(ctx_.Fail(sharded_->WriteWorking(p.li, values)));
  if (coordinator_) coordinator_->Rewrite(id, values);
  return absl::OkStatus();
}

absl::Status Engine::WriteMasterRange(int id, int64_t offset, int64_t count,
                                      const float* values) {
  RETURN_IF_ERROR(CheckWritable(id, values, "write_master_range"));
  const ParamRecord& p = params_.at(id);
  if (offset < 0 || count < 0 || offset > p.numel || count > p.numel - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "write_master_range '", p.name, "': elements [", offset, ", ", offset, " + ", count,
        ") are outside its ", p.numel, " elements"));
  }
  if (count == 0) return absl::OkStatus();
  // Only the elements this rank holds are touched: the owned part of the
  // master, the working copy's part (whole at stages 0-2, the owned slice at
  // stage 3), a persistent stage-3 param's copy, a frozen param.
  if (!p.trainable) {
    sharded_->WriteFrozenRange(id, offset, count, values);
    return absl::OkStatus();
  }
  const ParamPlace& pl = ctx_.layout.place(p.li);
  const GroupShard& gs = sharded_->group(pl.group);
  const int64_t lo = std::max(pl.offset + offset, gs.owned_begin);
  const int64_t hi = std::min(pl.offset + offset + count, gs.owned_begin + gs.owned_len);
  if (hi > lo) {
    RETURN_IF_ERROR(ctx_.Fail(store_->Write(pl.group, 0, lo - gs.owned_begin, hi - lo,
                                            values + (lo - pl.offset - offset))));
  }
  RETURN_IF_ERROR(ctx_.Fail(sharded_->WriteWorkingRange(p.li, offset, count, values)));
  if (coordinator_) coordinator_->WritePersistentRange(id, offset, count, values);
  return absl::OkStatus();
}

}  // namespace zero
