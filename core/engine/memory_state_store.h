// Optimizer state resident in memory: DeviceStateStore keeps it in the
// engine's device memory and updates it there; HostStateStore (ZeRO-Offload,
// host_state_store.h) keeps the same buffers in host memory.
#ifndef ZERO_CORE_ENGINE_MEMORY_STATE_STORE_H_
#define ZERO_CORE_ENGINE_MEMORY_STATE_STORE_H_

#include <vector>

#include "core/engine/optimizer_state_store.h"

namespace zero {

class DeviceStateStore : public OptimizerStateStore {
 public:
  // Buffers in `mem` (the engine's device, or the host for ZeRO-Offload).
  DeviceStateStore(EngineContext* ctx, Device* mem) : ctx_(ctx), mem_(mem) {}
  absl::Status Allocate(const std::vector<int64_t>& owned_lens);

  absl::Status Initialize(const InitVisitor& init) override;
  absl::Status Update(const OptimizerUpdate& u) override;
  absl::Status Read(int g, int array, int64_t begin, int64_t len, float* out) override;
  absl::Status Write(int g, int array, int64_t begin, int64_t len, const float* in) override;
  absl::StatusOr<const float*> MasterOnDevice(int g, int64_t begin, int64_t len,
                                              DeviceBuffer* scratch) override;
  absl::Status CastMaster(int g, void* dst) override;
  float* InMemory(int g, int array) override;
  Device* memory_device() const override { return mem_; }
  StateStoreStats stats() const override;

 protected:
  struct Arrays {
    int64_t len = 0;
    DeviceBuffer a[3];  // master, m, v
  };
  EngineContext* ctx_;
  Device* mem_;
  std::vector<Arrays> groups_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_MEMORY_STATE_STORE_H_
