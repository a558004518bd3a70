// Stage 3's gathers with ZeRO++ (docs/ARCHITECTURE.md, "Nodes, hybrid
// sharding and ZeRO++"):
//   qwZ (zero_quantized_weights): the all-gather moves each rank's slice as
//       int8 blocks with fp32 scales (kernels/quant_math.h); every rank, the
//       owner included, uses the dequantized values, so all hold the same
//       param;
//   hpZ (zero_hpz_partition_size P): the first gather of a param after its
//       values changed goes to every rank; each then keeps 1/P of the result
//       (its piece within its hpZ group) as a secondary shard, and the later
//       gathers of that param (the backward's, the next micro-steps') are
//       all-gathers of the secondary shards inside the group. An optimizer
//       step, a load or a write invalidates the secondary shards.
// Runs on the comm stream, like ShardedState::GatherInto which it extends.
#ifndef ZERO_CORE_ENGINE_ZEROPP_GATHER_H_
#define ZERO_CORE_ENGINE_ZEROPP_GATHER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/device/device.h"
#include "core/engine/engine_context.h"
#include "core/engine/sharded_state.h"

namespace zero {

class ZeroPPGather {
 public:
  ZeroPPGather(EngineContext* ctx, ShardedState* sharded) : ctx_(ctx), sharded_(sharded) {}

  bool enabled() const;
  // Param `li` whole into `dst` (device memory). Collective.
  absl::Status GatherInto(int li, void* dst);
  // The secondary shards are stale (values changed).
  void Invalidate(int li);
  void InvalidateAll();
  // hpZ: bytes of secondary shards held (allocated on first gather).
  int64_t secondary_bytes() const;

 private:
  absl::Status QuantizedGather(int li, void* dst);
  std::vector<int64_t> SecondaryCounts(int64_t numel) const;

  EngineContext* ctx_;
  ShardedState* sharded_;
  std::vector<DeviceBuffer> secondary_;  // by layout index
  std::vector<char> valid_;
  DeviceBuffer packed_, f32_;            // qwZ scratch (grown on demand)
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_ZEROPP_GATHER_H_
