// ZeRO-Offload on a GPU: master weights and moments in host memory, updated
// by the CPU (and on the CPU device with delayed_update: its master apart
// // from the working copy, docs/ARCHITECTURE.md "The delayed update"). Pieces of
// the owned range stream through two pairs of host buffers (page-locked when
// offload_optimizer.pin_memory) and two copy lanes, one per direction: while
// the CPU updates piece k, the gradients of piece k+1 come down and the
// working copy of piece k-1 goes up.
#ifndef ZERO_CORE_ENGINE_HOST_STATE_STORE_H_
#define ZERO_CORE_ENGINE_HOST_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "core/engine/copy_lane.h"
#include "core/engine/delayed_host_update.h"
#include "core/engine/memory_state_store.h"

namespace zero {

// A piece of group g's owned range, [begin, begin + len).
struct HostPiece {
  int g;
  int64_t begin, len;
};
// The pieces HostStateStore's pipelined update cuts from owned ranges of
// `owned` elements per group, in order: at most min(sub_group_size, 4M,
// max(64K, total/8)) each, so there are about 8 or more, the first and the
// last cut to about a quarter (the pipeline's fill and drain).
std::vector<HostPiece> HostUpdatePieces(const Config& c, const std::vector<int64_t>& owned);
// The largest of them (the memory estimator reads it too).
int64_t HostUpdatePieceElems(const Config& c, const std::vector<int64_t>& owned);

class HostStateStore : public DeviceStateStore {
 public:
  HostStateStore(EngineContext* ctx, ShardedState* sharded)
      : DeviceStateStore(ctx, ctx->host), sharded_(sharded) {}
  ~HostStateStore() override;

  absl::Status Update(const OptimizerUpdate& u) override;
  absl::StatusOr<const float*> MasterOnDevice(int g, int64_t begin, int64_t len,
                                              DeviceBuffer* scratch) override;
  absl::Status CastMaster(int g, void* dst) override;
  // offload_optimizer.delayed_update: every read of the state waits for
  // the update in flight; a write of the master also replaces the pending
  // working copy's elements (DelayedHostUpdate::PatchPending).
  absl::Status Read(int g, int array, int64_t begin, int64_t len, float* out) override;
  absl::Status Write(int g, int array, int64_t begin, int64_t len, const float* in) override;
  float* InMemory(int g, int array) override;
  absl::StatusOr<bool> LandDelayed() override;

 private:
  // The exact mode: the update of this step, pipelined piece by piece.
  absl::Status UpdatePipelined(const OptimizerUpdate& u);
  // The delayed mode: lands the last step's update, starts this one's.
  absl::Status UpdateDelayed(const OptimizerUpdate& u);
  void JoinDelayed() {
    if (delayed_ != nullptr) delayed_->Join();
  }

  // The exact mode's copy lanes and two pairs of piece buffers, made at
  // its first step and kept: page-locking (or, on the stand-in, faulting
  // in) fresh buffers every step cost more than a piece's copy.
  absl::Status EnsurePipeline(int64_t largest);
  void FreeBuffers();

  ShardedState* sharded_;
  std::unique_ptr<CopyLane> down_, up_;
  float* gbuf_[2] = {nullptr, nullptr};
  char* wbuf_[2] = {nullptr, nullptr};
  int64_t buffer_elems_ = 0;
  std::unique_ptr<DelayedHostUpdate> delayed_;  // made at the first delayed step
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_HOST_STATE_STORE_H_
