// offload_optimizer "nvme": master weights and moments in files under
// nvme_path (core/offload/nvme_tier.h), streamed in sub_group_size pieces
// through buffer_count host buffers: read k+1 while updating k while writing
// k-1. A step counts only if every rank wrote all of its state.
#ifndef ZERO_CORE_ENGINE_NVME_STATE_STORE_H_
#define ZERO_CORE_ENGINE_NVME_STATE_STORE_H_

#include <memory>
#include <vector>

#include "core/engine/optimizer_state_store.h"
#include "core/engine/q8_load_combiner.h"
#include "core/offload/nvme_tier.h"

namespace zero {

class NvmeStateStore : public OptimizerStateStore {
 public:
  explicit NvmeStateStore(EngineContext* ctx) : ctx_(ctx) {}
  absl::Status Create(const std::vector<int64_t>& owned_lens);

  absl::Status Initialize(const InitVisitor& init) override;
  absl::Status Update(const OptimizerUpdate& u) override;
  std::vector<UpdatePiece> UpdateOrder() const override;
  absl::Status Read(int g, int array, int64_t begin, int64_t len, float* out) override;
  absl::Status Write(int g, int array, int64_t begin, int64_t len, const float* in) override;
  absl::StatusOr<const float*> MasterOnDevice(int g, int64_t begin, int64_t len,
                                              DeviceBuffer* scratch) override;
  absl::Status CastMaster(int g, void* dst) override;
  // Checkpoints stream the state through Read/Write (ParamView::io),
  // bounded buffers: InMemory is always null. With 8-bit moments, moment
  // writes between Materialize and Spill (a load) go through a
  // Q8LoadCombiner: each block encoded once from its loaded values.
  float* InMemory(int g, int array) override;
  absl::Status Materialize() override;
  absl::Status Spill(bool write_back) override;
  // Checkpoints see the state in host memory when the engine's device is a
  // GPU (the files are read and written through host memory anyway).
  Device* memory_device() const override { return MemoryDevice(); }
  StateStoreStats stats() const override;

 private:
  Device* MemoryDevice() const {
    return ctx_->device->host_accessible() ? ctx_->device : ctx_->host;
  }
  // The engine's device is a GPU: master/m/v go up to `up_` for each piece
  // and back down (NVMe <-> host staging <-> device).
  bool staged() const { return !ctx_->device->host_accessible(); }
  // Bytes of state array a over n elements (packed moments: their format's).
  size_t ArrayBytes(int a, int64_t n) const;
  // The first `arrays` arrays of an n-element piece, together.
  int64_t PieceBytes(int64_t n, int arrays) const;
  // Where each array of an n-element piece sits in half `half` of up_.
  void OnDevice(size_t half, int64_t n, int arrays, float** dev) const;

  EngineContext* ctx_;
  // staged(): two halves of half_bytes_, each [master | m | v] (or
  // [master | packed moments]) of the largest piece: piece k's update in
  // one while k+1 goes up into the other.
  DeviceBuffer up_;
  int64_t half_bytes_ = 0;
  std::unique_ptr<offload::NvmeTier> tier_;
  std::vector<int64_t> lens_;
  std::unique_ptr<Q8LoadCombiner> combiner_;  // 8-bit moments only
  bool loading_ = false;  // between Materialize and Spill
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_NVME_STATE_STORE_H_
