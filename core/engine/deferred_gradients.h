// Gradient reductions the ranks differed on within one micro-step, put off
// to its end (docs/ARCHITECTURE.md, "When ranks disagree";
// ignore_unused_parameters): a rank that hands no gradient for a param the
// others hand in fills its buckets with other params, so the bucket
// reductions' signatures differ (CheckedCommunicator: BucketDivergence,
// no data moved). From there every rank keeps its gradients: stage 0 in
// its full local gradient (the boundary's leftover reduction takes them,
// in layout order, the same on every rank), stage 2 in a buffer of the
// model's size made on the first deferral. At the micro-step's end the
// ranks agree on the union of what any of them deferred, and reduce it in
// layout order, a rank without a param's gradient contributing zeros: the
// same element sums as the run where it handed in zeros.
#ifndef ZERO_CORE_ENGINE_DEFERRED_GRADIENTS_H_
#define ZERO_CORE_ENGINE_DEFERRED_GRADIENTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/engine/engine_context.h"
#include "core/engine/param_registry.h"

namespace zero {

class DeferredGradients {
 public:
  // Whether an engine defers rather than fails (ignore_unused_parameters
  // true, stage 0 or 2, more than one rank, one replica, no qgZ: their
  // reductions span other communicators).
  static bool Enabled(const EngineContext& ctx, bool quantized_reduce);

  DeferredGradients(EngineContext* ctx, const ParamRegistry* params);

  // A deferral happened in this micro-step.
  bool active() const { return active_; }
  void Activate() { active_ = true; }

  // Stage 2: the bucket's gradients (`ids`, each numel elements at data +
  // offsets[k] elements) kept for the end of the micro-step.
  absl::Status Keep(const std::vector<int>& ids, const char* data,
                    const std::vector<int64_t>& offsets);

  // A batch for GradientReducer::ReduceBucket over data().
  struct Batch {
    std::vector<int> ids;
    std::vector<int64_t> offsets;
  };
  // COLLECTIVE (on the comm stream): the params any rank kept, in layout
  // order, in batches of at most `cap` elements (a larger param alone).
  absl::StatusOr<std::vector<Batch>> AgreeBatches(int64_t cap);
  const char* data() const { return buffer_.data<char>(); }

  // The micro-step is over: what was kept is zeroed for the next deferral.
  void Reset();

 private:
  // Allocates the zeroed buffer on first use.
  absl::Status EnsureBuffer();

  EngineContext* ctx_;
  const ParamRegistry* params_;
  std::vector<int64_t> flat_;  // by layout index: its offset in buffer_
  std::vector<char> kept_;     // by layout index
  DeviceBuffer buffer_;        // working dtype, every trainable element
  bool active_ = false;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_DEFERRED_GRADIENTS_H_
