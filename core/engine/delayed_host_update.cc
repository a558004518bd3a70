#include "core/engine/delayed_host_update.h"

#include <algorithm>
#include <utility>

#include "core/common/status_macros.h"
#include "core/engine/sharded_state.h"

namespace zero {

DelayedHostUpdate::~DelayedHostUpdate() {
  Join();
  const bool pin = ctx_->config.offload_optimizer.pin_memory;
  for (float* p : grads_) ctx_->device->FreeHost(p, pin);
  for (char* p : work_) ctx_->device->FreeHost(p, pin);
}

int64_t DelayedHostUpdate::buffer_bytes() const {
  if (grads_.empty()) return 0;
  int64_t n = 0;
  for (int64_t len : lens_) n += len * (4 + static_cast<int64_t>(ctx_->es()));
  return n;
}

absl::Status DelayedHostUpdate::AllocateOnce() {
  if (!grads_.empty()) return absl::OkStatus();
  const bool pin = ctx_->config.offload_optimizer.pin_memory;
  for (int64_t len : lens_) {
    // Page-locked with pin_memory, as the exact mode's piece buffers: the
    // copies down and up then run at the link's speed.
    ASSIGN_OR_RETURN(void* g, ctx_->device->AllocateHost(std::max<int64_t>(1, len) * 4, pin));
    grads_.push_back(static_cast<float*>(g));
    ASSIGN_OR_RETURN(void* w, ctx_->device->AllocateHost(
                                  std::max<int64_t>(1, len) * ctx_->es(), pin));
    work_.push_back(static_cast<char*>(w));
  }
  return absl::OkStatus();
}

void DelayedHostUpdate::Join() {
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<bool> DelayedHostUpdate::Land() {
  Join();
  if (!pending_) return false;
  for (size_t g = 0; g < lens_.size(); ++g) {
    if (lens_[g] == 0) continue;
    ctx_->device->Copy(sharded_->OwnedWorking(static_cast<int>(g), 0), work_[g],
                       lens_[g] * ctx_->es());
  }
  pending_ = false;
  return true;
}

absl::Status DelayedHostUpdate::Start(const std::vector<float*>& grads, GroupStep step) {
  RETURN_IF_ERROR(AllocateOnce());
  RETURN_IF_ERROR(Land().status());
  // The gradients come down now: the boundary zeroes them, and the next
  // step's backward writes them, while this update runs.
  for (size_t g = 0; g < lens_.size(); ++g) {
    if (lens_[g] > 0) ctx_->device->Copy(grads_[g], grads[g], lens_[g] * 4);
  }
  pending_ = true;
  thread_ = std::thread([this, step = std::move(step)] {
    for (size_t g = 0; g < lens_.size(); ++g) {
      if (lens_[g] > 0) step(static_cast<int>(g), grads_[g], work_[g]);
    }
  });
  return absl::OkStatus();
}

void DelayedHostUpdate::PatchPending(int g, int64_t begin, int64_t len, const float* values) {
  Join();
  if (!pending_ || len <= 0) return;
  ctx_->host->FromF32(values, work_[g] + begin * ctx_->es(), ctx_->dtype(), len);
}

}  // namespace zero
