#include "core/engine/engine_stats.h"

#include "core/engine/engine_context.h"
#include "core/engine/gradient_reducer.h"
#include "core/engine/hierarchy.h"
#include "core/engine/optimizer_boundary.h"
#include "core/engine/optimizer_state_store.h"
#include "core/engine/param_coordinator.h"
#include "core/engine/sharded_state.h"

namespace zero {

EngineStats CollectStats(const EngineParts& p) {
  const EngineContext& ctx = *p.ctx;
  EngineStats s;
  s.rank = ctx.rank;
  s.world_size = ctx.world;
  s.stage = ctx.config.stage;
  s.comm_dtype = ctx.config.CommDType();
  s.trainable_numel = ctx.layout.total_numel();
  s.padded_numel = ctx.layout.total_padded();
  if (p.sharded) {
    s.grad_bytes = p.sharded->grad_bytes();
    // With offload_param "cpu" on a device the own shard is host memory:
    // still this rank's model-state bytes (the ZeRO formula), not the device's.
    s.param_bytes = p.sharded->working_bytes() + p.sharded->host_param_bytes();
    s.frozen_bytes = p.sharded->frozen_bytes();
    s.nvme_grad_bytes = p.sharded->grad_file_bytes();
    s.nvme_bytes += p.sharded->param_file_bytes() + s.nvme_grad_bytes;
    s.buffer_bytes += p.sharded->gather_staging_bytes();
  }
  if (p.store) {
    const StateStoreStats t = p.store->stats();
    s.master_bytes = t.master_bytes;
    s.optimizer_bytes = t.optimizer_bytes;
    s.buffer_bytes += t.device_buffer_bytes;
    s.nvme_bytes += t.file_bytes;
    s.nvme_read_bytes = t.read_bytes;
    s.nvme_write_bytes = t.write_bytes;
    s.nvme_direct_io = t.direct_io;
    s.nvme_uring = t.uring;
    s.offload_note = t.note;
  }
  if (p.coordinator) {
    s.param_bytes += p.coordinator->persistent_bytes();
    // Params gathered into callers' memory (gather_into) are live, not the
    // engine's buffers.
    s.buffer_bytes += p.coordinator->live_bytes() - p.coordinator->caller_bytes() +
                      p.coordinator->pooled_bytes() + p.coordinator->refresh_staging_bytes();
    s.live_gathered_bytes = p.coordinator->live_bytes();
    s.live_gathered_high_water = p.coordinator->live_high_water();
  }
  if (p.reducer) s.buffer_bytes += p.reducer->buffer_bytes();
  if (p.boundary) {
    s.buffer_bytes += p.boundary->scratch_bytes();
    if (p.boundary->muon() != nullptr) {
      s.muon_bytes = p.boundary->muon()->buffer_bytes();
      s.buffer_bytes += s.muon_bytes;
    }
    s.global_step = p.boundary->counters().global_step;
    s.skipped_steps = p.boundary->counters().skipped_steps;
    s.micro_step = p.boundary->counters().micro_step;
  }
  const CommCounters& c = ctx.comm->counters();
  for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
    s.sent[k] = c.sent[k].load();
    s.sent_bytes[k] = c.sent_bytes[k].load();
  }
  s.collective_calls = c.calls.load();
  if (ctx.hier != nullptr) {
    const Hierarchy& h = *ctx.hier;
    for (const Communicator* e : h.extra()) {
      for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
        s.sent[k] += e->counters().sent[k].load();
        s.sent_bytes[k] += e->counters().sent_bytes[k].load();
      }
      s.collective_calls += e->counters().calls.load();
    }
    for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
      for (int l = 0; l < 2; ++l) {
        s.link_elems[k][l] = h.links().elems[k][l].load();
        s.link_bytes[k][l] = h.links().bytes[k][l].load();
      }
    }
    s.nodes = h.topology().nodes;
    s.node = h.topology().node();
    s.ranks_per_node = h.topology().uniform_ranks_per_node();
    s.replicas = h.replicas();
  }
  if (p.coordinator) {
    s.hpz_secondary_bytes = p.coordinator->secondary_bytes();
    s.buffer_bytes += s.hpz_secondary_bytes;
  }
  return s;
}

}  // namespace zero
