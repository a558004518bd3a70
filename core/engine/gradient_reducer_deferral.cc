// GradientReducer's deferral of the bucket reductions the ranks differ on
// (ignore_unused_parameters; core/engine/deferred_gradients.h,
// docs/ARCHITECTURE.md, "When ranks disagree"): kept apart from the
// reductions themselves (gradient_reducer.cc), and stage 1's check that
// every rank handed in every param when they may not differ.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/call_site.h"
#include "core/comm/checked_communicator.h"
#include "core/common/errors.h"
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

absl::Status GradientReducer::CheckAllHandedIn() {
  Communicator* c = ctx_->ctrl;
  const int n = static_cast<int>(handed_in_.size());
  const int world = c->world_size();
  if (world < 2 || n == 0) return absl::OkStatus();
  std::vector<float> mine(handed_in_.begin(), handed_in_.end());
  std::vector<float> all(static_cast<size_t>(n) * world);
  RETURN_IF_ERROR(c->AllGatherV(mine.data(), all.data(), std::vector<int64_t>(world, n),
                                DType::kF32));
  std::string missing;
  int count = 0;
  for (int id = 0; id < params_->size(); ++id) {
    const ParamRecord& p = params_->at(id);
    if (!p.trainable || p.li < 0) continue;
    std::string ranks;
    bool some = false;
    for (int r = 0; r < world; ++r) {
      if (all[static_cast<size_t>(r) * n + p.li] != 0.0f) {
        some = true;
      } else {
        absl::StrAppend(&ranks, ranks.empty() ? "" : ", ", r);
      }
    }
    if (!some || ranks.empty()) continue;  // used everywhere, or nowhere
    if (count++ < 8) absl::StrAppend(&missing, count > 1 ? "; " : "", "'", p.name, "' (rank ", ranks, ")");
  }
  if (count == 0) return absl::OkStatus();
  if (count > 8) absl::StrAppend(&missing, "; and ", count - 8, " more");
  return MismatchError(absl::StrCat(
      "step: ignore_unused_parameters is false and ", count,
      " param(s) got no gradient on some ranks this micro-step: ", missing,
      ". Hand in every param's gradient on every rank (a zero gradient where "
      "a param was not used), or set ignore_unused_parameters true to count "
      "them as zero gradients"));
}

}  // namespace zero
