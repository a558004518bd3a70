// ZeRO-Offload's one-step delayed parameter update
// (offload_optimizer.delayed_update; docs/ARCHITECTURE.md, "Offload"): the
// host update of step t runs on a thread of its own while the caller runs
// step t+1's forward and backward on the device, and its working copy goes
// up at the next boundary. The thread touches host memory only (the master
// and moments, and this class's gradient and working-copy buffers): no
// memory a caller or the device can see changes outside an engine call.
#ifndef ZERO_CORE_ENGINE_DELAYED_HOST_UPDATE_H_
#define ZERO_CORE_ENGINE_DELAYED_HOST_UPDATE_H_

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "core/engine/engine_context.h"

namespace zero {

class ShardedState;

class DelayedHostUpdate {
 public:
  // The host update of group g: gradients `grad` (fp32, host), the
  // updated working copy written to `work` (the working dtype, host).
  using GroupStep = std::function<void(int g, const float* grad, char* work)>;

  DelayedHostUpdate(EngineContext* ctx, ShardedState* sharded, std::vector<int64_t> owned_lens)
      : ctx_(ctx), sharded_(sharded), lens_(std::move(owned_lens)) {}
  ~DelayedHostUpdate();
  DelayedHostUpdate(const DelayedHostUpdate&) = delete;
  DelayedHostUpdate& operator=(const DelayedHostUpdate&) = delete;

  // Lands the update in flight (Land), copies this step's fp32 owned
  // gradients down (`grads`: device memory, one per group) and starts
  // `step` over every group on the update thread.
  absl::Status Start(const std::vector<float*>& grads, GroupStep step);
  // Waits for the update in flight and writes its working copy into this
  // rank's owned range of the device's working copy (not yet published:
  // the boundary does that). False when none was in flight.
  absl::StatusOr<bool> Land();
  // Waits for the update in flight; its working copy stays pending for the
  // next Land. The master and moments are then those of the last update.
  void Join();
  // write_master while a working copy is pending: the written values (cast)
  // replace the pending ones at owned elements [begin, begin+len) of group
  // g, so the next Land does not bring back what was overwritten.
  void PatchPending(int g, int64_t begin, int64_t len, const float* values);
  bool pending() const { return pending_; }
  int64_t buffer_bytes() const;

 private:
  absl::Status AllocateOnce();

  EngineContext* ctx_;
  ShardedState* sharded_;
  std::vector<int64_t> lens_;
  std::vector<float*> grads_;  // host, fp32, owned length per group
  std::vector<char*> work_;    // host, working dtype, owned length per group
  std::thread thread_;         // the update in flight (joinable)
  bool pending_ = false;       // work_ holds a working copy not yet landed
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_DELAYED_HOST_UPDATE_H_
