// Optimizer state resident in memory: DeviceStateStore keeps it in the
// engine's device memory and updates it there; HostStateStore (ZeRO-Offload,
// host_state_store.h) keeps the same buffers in host memory.
#ifndef ZERO_CORE_ENGINE_MEMORY_STATE_STORE_H_
#define ZERO_CORE_ENGINE_MEMORY_STATE_STORE_H_

#include <vector>

#include "core/engine/optimizer_state_store.h"
#include "core/engine/sharded_state.h"

namespace zero {

class DeviceStateStore : public OptimizerStateStore {
 public:
  // Buffers in `mem` (the engine's device, or the host for ZeRO-Offload).
  DeviceStateStore(EngineContext* ctx, Device* mem) : ctx_(ctx), mem_(mem) {}
  // `working` (may be null): an fp32 working copy whose owned range lies in
  // `mem`. The master is then that range itself, no buffer of its own: for
  // fp32 the two hold the same bits at every step (the update writes the
  // master and its fp32 cast, the same values, and every write of the
  // master writes the working copy too), so the copy only cost 4 bytes per
  // owned element of peak memory (docs/ARCHITECTURE.md, "Precision").
  absl::Status Allocate(const std::vector<int64_t>& owned_lens,
                        ShardedState* working = nullptr);

  absl::Status Initialize(const InitVisitor& init) override;
  absl::Status Update(const OptimizerUpdate& u) override;
  absl::Status Read(int g, int array, int64_t begin, int64_t len, float* out) override;
  absl::Status Write(int g, int array, int64_t begin, int64_t len, const float* in) override;
  absl::StatusOr<const float*> MasterOnDevice(int g, int64_t begin, int64_t len,
                                              DeviceBuffer* scratch) override;
  absl::Status CastMaster(int g, void* dst) override;
  float* InMemory(int g, int array) override;
  // Packed moments (core/engine/packed_moments.h): fp32 copies for a
  // checkpoint, encoded back after a load.
  absl::Status Materialize() override;
  absl::Status Spill(bool write_back) override;
  Device* memory_device() const override { return mem_; }
  StateStoreStats stats() const override;

 protected:
  struct Arrays {
    int64_t len = 0;
    DeviceBuffer a[3];  // master, m, v; packed moments: master, moments
    DeviceBuffer unpacked[2];  // packed moments as fp32 m, v while materialized
    float* alias = nullptr;  // the master in the working copy (a[0] empty)
  };
  // The packed moments of group g from element `begin` (null: fp32 moments).
  float* Packed(int g, int64_t begin) const;
  // Array `array` of group g (null: no such array).
  float* Array(int g, int array) const {
    const Arrays& s = groups_[g];
    if (array == 0 && s.alias != nullptr) return s.alias;
    if (array > 0 && packed_) return s.unpacked[array - 1].data<float>();
    return s.a[array].data<float>();
  }
  EngineContext* ctx_;
  Device* mem_;
  std::vector<Arrays> groups_;
  bool packed_ = false;  // moments in one packed array a[1]
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_MEMORY_STATE_STORE_H_
