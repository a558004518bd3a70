// GradientReducer's deferral of the bucket reductions the ranks differ on
// (ignore_unused_parameters; core/engine/deferred_gradients.h,
// docs/ARCHITECTURE.md, "When ranks disagree"): kept apart from the
// reductions themselves (gradient_reducer.cc).
#include "core/comm/call_site.h"
#include "core/comm/checked_communicator.h"
#include "core/common/status_macros.h"
#include "core/engine/gradient_reducer.h"

namespace zero {

// Runs on the comm stream.
absl::Status GradientReducer::ReduceOrDefer(const std::vector<int>& ids, const void* data,
                                            const std::vector<int64_t>& offsets,
                                            bool boundary) {
  if (!deferred_) return ReduceBucket(ids, data, offsets, boundary);
  if (!deferred_->active()) {
    absl::Status s;
    {
      ScopedDeferrable deferrable;
      s = ReduceBucket(ids, data, offsets, boundary);
    }
    if (!IsBucketDivergence(s)) return s;
    // No data moved. Stage 0 added the bucket into the local gradient
    // before its collective (AllReduceInSlots leaves the sum in the slots
    // and copies it back): it stays there, not reduced at this boundary.
    deferred_->Activate();
    if (ctx_->stage() == 0) return absl::OkStatus();
  } else if (ctx_->stage() == 0) {
    return ReduceBucket(ids, data, offsets, /*boundary=*/false);  // adds it in
  }
  return deferred_->Keep(ids, static_cast<const char*>(data), offsets);
}

absl::Status GradientReducer::FinishDeferred(bool boundary) {
  CommStream* st = ctx_->stream;
  absl::Status s = st->Wait(st->Submit([this]() -> absl::Status {
    if (deferred_->active()) return absl::OkStatus();
    ScopedDeferrable deferrable;
    return ctx_->checked->AgreeOnCall();
  }));
  if (IsBucketDivergence(s)) {
    deferred_->Activate();
    s = absl::OkStatus();
  }
  if (s.ok() && deferred_->active() && ctx_->stage() == 2) {
    s = st->Wait(st->Submit([this, boundary]() -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<DeferredGradients::Batch> batches,
                       deferred_->AgreeBatches(bucket_cap_));
      for (const DeferredGradients::Batch& b : batches) {
        RETURN_IF_ERROR(ReduceBucket(b.ids, deferred_->data(), b.offsets, boundary));
      }
      return absl::OkStatus();
    }));
  }
  (void)st->Drain();
  deferred_->Reset();
  return s;
}

}  // namespace zero
