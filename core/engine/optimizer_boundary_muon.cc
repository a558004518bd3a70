// The boundary's Muon phase wiring (core/engine/muon_phase.h): which
// gradients it reads, and when it is on.
#include "core/common/status_macros.h"
#include "core/engine/optimizer_boundary.h"

namespace zero {

absl::Status OptimizerBoundary::EnableMuon(std::vector<MuonMatrix> matrices) {
  const MuonSettings* settings = optimizer_->muon();
  if (settings == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(muon_, MuonPhase::Make(ctx_, sharded_, store_, *settings, std::move(matrices)));
  return absl::OkStatus();
}

MuonGradReader OptimizerBoundary::MuonGrads(const GradPlan& plan) {
  return [this, &plan](int g, int64_t begin, int64_t len, float* out) -> absl::Status {
    Device* device = ctx_->device;
    if (plan.streamed) {
      // Stage 3's gradient files: this slice, raw.
      RETURN_IF_ERROR(sharded_->ReadGradsRaw(g, begin, len, stream_raw_.data()));
      device->DownloadF32(stream_raw_.data(), ctx_->dtype(), out, len);
      return absl::OkStatus();
    }
    device->DownloadF32(static_cast<const char*>(plan.src[g]) + begin * DTypeSize(plan.src_t),
                        plan.src_t, out, len);
    return absl::OkStatus();
  };
}

}  // namespace zero
