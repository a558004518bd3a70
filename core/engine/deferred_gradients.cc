#include "core/engine/deferred_gradients.h"

#include <algorithm>

#include "core/common/status_macros.h"

namespace zero {

bool DeferredGradients::Enabled(const EngineContext& ctx, bool quantized_reduce) {
  return ctx.config.ignore_unused_parameters && (ctx.stage() == 0 || ctx.stage() == 2) &&
         ctx.world > 1 && ctx.replicas == 1 && !quantized_reduce && ctx.checked != nullptr;
}

DeferredGradients::DeferredGradients(EngineContext* ctx, const ParamRegistry* params)
    : ctx_(ctx), params_(params) {
  const auto& lps = ctx_->layout.params();
  flat_.resize(lps.size());
  int64_t at = 0;
  for (size_t li = 0; li < lps.size(); ++li) {
    flat_[li] = at;
    at += lps[li].numel;
  }
  kept_.assign(lps.size(), 0);
}

absl::Status DeferredGradients::EnsureBuffer() {
  if (buffer_.bytes() > 0) return absl::OkStatus();
  const int64_t total = flat_.empty() ? 0 : flat_.back() + ctx_->layout.params().back().numel;
  ASSIGN_OR_RETURN(buffer_, DeviceBuffer::Make(ctx_->device, total * ctx_->es()));
  ctx_->device->Memset0(buffer_.data(), buffer_.bytes());
  return absl::OkStatus();
}

absl::Status DeferredGradients::Keep(const std::vector<int>& ids, const char* data,
                                     const std::vector<int64_t>& offsets) {
  const size_t es = ctx_->es();
  RETURN_IF_ERROR(EnsureBuffer());
  for (size_t k = 0; k < ids.size(); ++k) {
    const ParamRecord& p = params_->at(ids[k]);
    ctx_->device->CopyQueued(buffer_.data<char>() + flat_[p.li] * es, data + offsets[k] * es,
                             p.numel * es);
    kept_[p.li] = 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DeferredGradients::Batch>> DeferredGradients::AgreeBatches(
    int64_t cap) {
  std::vector<float> any(kept_.begin(), kept_.end());
  RETURN_IF_ERROR(ctx_->ctrl->AllReduce(any.data(), static_cast<int64_t>(any.size()),
                                        ReduceOp::kMax));
  std::vector<Batch> out;
  int64_t used = 0;
  for (size_t li = 0; li < any.size(); ++li) {
    if (any[li] == 0.0f) continue;
    const int64_t n = ctx_->layout.params()[li].numel;
    if (out.empty() || used + n > cap || n > cap) {
      out.emplace_back();
      used = 0;
    }
    out.back().ids.push_back(params_->trainable_ids()[li]);
    out.back().offsets.push_back(flat_[li]);
    used += n;
  }
  // A rank that kept nothing (its peers deferred what it had reduced, or it
  // had no gradient left) still contributes zeros to the batches: from a
  // buffer of its own, never a null one.
  if (!out.empty()) RETURN_IF_ERROR(EnsureBuffer());
  return out;
}

void DeferredGradients::Reset() {
  if (buffer_.bytes() > 0 && std::find(kept_.begin(), kept_.end(), 1) != kept_.end()) {
    ctx_->device->Memset0(buffer_.data(), buffer_.bytes());
  }
  std::fill(kept_.begin(), kept_.end(), 0);
  active_ = false;
}

}  // namespace zero
