// What an engine reports about itself (zero_stats): bytes per category,
// traffic per collective kind, steps. Gathered from the parts by
// CollectStats (engine_stats.cc).
#ifndef ZERO_CORE_ENGINE_ENGINE_STATS_H_
#define ZERO_CORE_ENGINE_ENGINE_STATS_H_

#include <cstdint>
#include <string>

#include "core/comm/communicator.h"
#include "core/common/dtype.h"

namespace zero {

struct EngineContext;
class ShardedState;
class OptimizerStateStore;
class ParamCoordinator;
class GradientReducer;
class OptimizerBoundary;

struct EngineStats {
  int rank = 0, world_size = 1, stage = 0;
  // The dtype gradients are reduced in (communication_data_type, or
  // DeepSpeed's default: the working dtype).
  DType comm_dtype = DType::kF32;
  int64_t trainable_numel = 0, padded_numel = 0;
  int64_t master_bytes = 0, optimizer_bytes = 0, grad_bytes = 0;
  int64_t param_bytes = 0, frozen_bytes = 0, buffer_bytes = 0;
  int64_t live_gathered_bytes = 0, live_gathered_high_water = 0;
  // Of buffer_bytes: the Muon phase's host buffers (core/engine/muon_phase.h;
  // made at the first step; 0 without Muon).
  int64_t muon_bytes = 0;
  int64_t sent[static_cast<int>(CollectiveKind::kCount)] = {};
  int64_t sent_bytes[static_cast<int>(CollectiveKind::kCount)] = {};
  int64_t collective_calls = 0;
  int64_t global_step = 0, skipped_steps = 0, micro_step = 0;
  // NVMe optimizer offload (zero when off). master_bytes and optimizer_bytes
  // above count host-resident bytes only; with NVMe that is the staging
  // buffers (optimizer_bytes), bounded by buffer_count sub-groups.
  int64_t nvme_bytes = 0;                  // state files on disk (both slots)
  // Of nvme_bytes: stage 3's gradient files (one slot even with atomic_step:
  // a failed step's gradients are not state to keep).
  int64_t nvme_grad_bytes = 0;
  int64_t nvme_read_bytes = 0, nvme_write_bytes = 0;  // cumulative
  int nvme_direct_io = 0, nvme_uring = 0;  // 1: O_DIRECT / io_uring in use
  std::string offload_note;                // fallbacks taken (O_DIRECT, io_uring)
  // Beyond one node (core/engine/hierarchy.h). Traffic per link: what this
  // rank sent per collective kind, [kind][0: intra-node, 1: inter-node], in
  // values carried and bytes on the wire (quantized payloads: fewer bytes
  // than values x element size); sums over links equal sent/sent_bytes.
  int64_t link_elems[static_cast<int>(CollectiveKind::kCount)][2] = {};
  int64_t link_bytes[static_cast<int>(CollectiveKind::kCount)][2] = {};
  int nodes = 1, node = 0, ranks_per_node = 1;  // -1: nodes differ in size
  int replicas = 1;                 // hybrid sharding: copies of each shard
  int64_t hpz_secondary_bytes = 0;  // hpZ's secondary param shards
};

// The parts that exist (before finalize only the context).
struct EngineParts {
  const EngineContext* ctx = nullptr;
  const ShardedState* sharded = nullptr;
  const OptimizerStateStore* store = nullptr;
  const ParamCoordinator* coordinator = nullptr;
  const GradientReducer* reducer = nullptr;
  const OptimizerBoundary* boundary = nullptr;
};

EngineStats CollectStats(const EngineParts& parts);

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_ENGINE_STATS_H_
