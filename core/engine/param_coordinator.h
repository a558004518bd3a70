// Stage 3's parameter life cycle (docs/ARCHITECTURE.md, "Stage 3"): a
// param is all-gathered on demand into a live buffer and freed on its last
// release; the order of gathers in the first micro-step is the trace that
// later micro-steps prefetch along (stage3_prefetch_bucket_size, on the comm
// stream); live gathered elements never exceed stage3_max_live_parameters;
// params under stage3_param_persistence_threshold stay whole everywhere.
#ifndef ZERO_CORE_ENGINE_PARAM_COORDINATOR_H_
#define ZERO_CORE_ENGINE_PARAM_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/comm_stream.h"
#include "core/device/device.h"
#include "core/engine/engine_context.h"
#include "core/engine/param_registry.h"
#include "core/engine/sharded_state.h"
#include "core/engine/zeropp_gather.h"

namespace zero {

// Elements of the staging that coalesces the persistent params' refresh
// (ParamCoordinator::RefreshPersistent) for params of `numels` (persistent
// ones only) over `world` ranks: the sum, capped at `allgather_bucket_size`
// (a param above the cap goes alone, without staging); 0 where nothing is
// coalesced. Shared with the memory estimator.
int64_t CoalescedRefreshElems(const std::vector<int64_t>& numels, int world,
                              int64_t allgather_bucket_size);

class ParamCoordinator {
 public:
  ParamCoordinator(EngineContext* ctx, const ParamRegistry* params, ShardedState* sharded)
      : ctx_(ctx), params_(params), sharded_(sharded), zpp_(ctx, sharded) {}
  ~ParamCoordinator();

  // Persistent params: whole buffers filled from the init values.
  absl::Status AllocatePersistent();
  bool persistent(int id) const { return !persistent_.empty() && persistent_[id].data(); }

  // Param `id` whole in device memory (collective unless persistent).
  absl::StatusOr<void*> Gather(int id);
  // Param `id` whole in the caller's memory `dst` (host memory here: the
  // engine checks), held like a Gather until Release: it counts against
  // the live budget and in live_bytes(), and Prefetch follows the trace
  // alike. A param not live is all-gathered straight into `dst` (no
  // buffer of the engine's, no copy); a live one (prefetched, or held by
  // another gather) is copied from where it is (docs/ARCHITECTURE.md,
  // "Stage 3", gather_into). The caller must leave `dst` unwritten until
  // its release: a nested GatherInto copies from it. A plain Gather of a
  // param held in caller memory is refused (the engine has no copy of its
  // own to hand out).
  absl::Status GatherInto(int id, void* dst);
  void Release(int id);
  // The end of a micro-step: prefetched params nobody used are freed; the
  // first micro-step's gathers become the trace.
  void EndMicroStep();
  // Every live buffer freed (a checkpoint load makes them stale).
  void FreeAll();
  // Param `id`'s values changed: a persistent copy is set from `values`
  // (full fp32), an unheld prefetched copy is dropped.
  void Rewrite(int id, const float* values);
  // After an optimizer step: the persistent params gathered anew, many
  // small params per all-gather (coalesced through `refresh_staging_`; one
  // call instead of one per param). Runs on the comm stream.
  absl::Status RefreshPersistent();
  // The coalescing staging: the persistent elements of the largest batch
  // (at most allgather_bucket_size) times es; none at one rank or with
  // fewer than two persistent params (CoalescedRefreshElems).
  int64_t refresh_staging_bytes() const { return static_cast<int64_t>(refresh_staging_.bytes()); }

  // Elements [offset, offset+count) of persistent param `id` set from fp32
  // `values`; for other params an unheld live copy is dropped (stale).
  void WritePersistentRange(int id, int64_t offset, int64_t count, const float* values);

  int64_t live_bytes() const { return live_bytes_; }
  // Of live_bytes(), those held in callers' memory (GatherInto), not the
  // engine's.
  int64_t caller_bytes() const { return caller_bytes_; }
  // Freed gather buffers kept for the next gather of the same size, this
  // micro-step only (TakeBuffer).
  int64_t pooled_bytes() const { return pooled_bytes_; }
  int64_t live_high_water() const { return live_high_water_; }
  int64_t persistent_bytes() const;
  // hpZ's secondary shards (zeropp_gather.h).
  int64_t secondary_bytes() const { return zpp_.secondary_bytes(); }

 private:
  struct Live {
    DeviceBuffer buf;
    int refs = 0;
    CommStream::Handle pending;  // prefetch in flight
    // Held in the caller's memory (GatherInto): `buf` is empty.
    void* caller = nullptr;
  };
  // offload_param "cpu" on a device with async_uploads(): this rank's slice,
  // uploaded on the copy stream when the prefetch was scheduled, and its
  // event. The gather task owns it and frees it once the all-gather
  // returned; a task dropped unrun still waits for the event (destructor)
  // before the buffer is freed, stream-ordered.
  struct Upload {
    Device* device = nullptr;
    DeviceBuffer buf;
    void* event = nullptr;
    ~Upload() {
      if (event != nullptr) device->WaitForUpload(event);
    }
  };
  absl::Status EnsureBudget(int64_t need, int id);
  // A buffer of `bytes` for a gather: a freed one of the same size when the
  // pool has one, else a new one. On a host device a new buffer is fresh
  // pages (cpu_device.cc maps buffers of 1 MiB and up), and the all-gather
  // that first writes them takes a page fault per 4 KiB on the comm
  // threads: most of their CPU at stage 3 before the pool
  // (bench/README.md, "Stage 3's runtime threads"). Held memory (live +
  // pooled) stays within PoolCap(), and the pool is emptied at the end of
  // each micro-step (before the update).
  absl::StatusOr<DeviceBuffer> TakeBuffer(int64_t bytes);
  // Twice the largest live set so far, within the stage3_max_live_parameters
  // budget (never below the live set itself): the live set cycles through
  // params of a few sizes (a transformer's blocks), and a cap of the live
  // set alone left no room for a buffer of each size (it evicted nearly
  // every one before its size came round again). A model whose params all
  // differ in size gains nothing from the pool and holds at most this.
  int64_t PoolCap() const;
  // Keeps `buf` for reuse when that stays within the bound, else frees it.
  void ReturnBuffer(DeviceBuffer buf);
  void DrainPool();
  void Prefetch(int id);
  void FreeLive(int id);
  // One gather on the comm stream: ZeRO++ (hpZ, qwZ) when configured.
  absl::Status GatherOnStream(int li, void* dst);
  // GatherOnStream submitted to the comm stream, timed as a gather phase
  // (`what`: "gather" or "prefetch").
  CommStream::Handle SubmitGather(int li, void* dst, const char* what);
  // Persistent params `ids` (in order) in one all-gather through the staging.
  absl::Status RefreshBatch(const std::vector<int>& ids);

  EngineContext* ctx_;
  const ParamRegistry* params_;
  ShardedState* sharded_;
  std::vector<DeviceBuffer> persistent_;  // by param id
  DeviceBuffer refresh_staging_;
  std::unordered_map<int, Live> live_;
  int64_t live_bytes_ = 0, live_high_water_ = 0, caller_bytes_ = 0;
  // Freed gather buffers (TakeBuffer); only on host-accessible devices: a
  // GPU's caching allocator already reuses freed blocks.
  std::vector<DeviceBuffer> pool_;
  int64_t pooled_bytes_ = 0;
  std::vector<int> trace_;  // gather order seen in the first micro-step
  bool trace_done_ = false;
  size_t trace_pos_ = 0;
  ZeroPPGather zpp_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_PARAM_COORDINATOR_H_
