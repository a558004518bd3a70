// Stage 3 with gradients and working params in files (ZeRO-Infinity,
// docs/ARCHITECTURE.md "Offload"): the optimizer step's gradient reads and
// working-copy writes, moved off the caller's thread. The NVMe store visits
// its pieces in a known order (OptimizerStateStore::UpdateOrder); while the
// caller updates piece k, an IO thread reads the gradients of pieces
// k+1 .. k+D-1 and another writes the working copies of the pieces before
// k, through D buffers of each (D = offload_optimizer.buffer_count): host
// memory 2·D·piece·es whatever the model size. The optimizer state itself
// streams through the tier's own pipeline (core/offload/nvme_tier.h) at the
// same time. The bytes read and written are those of the blocking path
// (ShardedState::ReadGradsRaw, ParamFile::Write, in the same order per
// file); only when they happen changes, so the bits do not.
#ifndef ZERO_CORE_ENGINE_UPDATE_IO_PIPELINE_H_
#define ZERO_CORE_ENGINE_UPDATE_IO_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/comm_stream.h"
#include "core/device/device.h"
#include "core/engine/optimizer_state_store.h"
#include "core/engine/sharded_state.h"

namespace zero {

class UpdateIoPipeline {
 public:
  // `depth` buffers per direction (>= 2); pieces of at most `piece` elements.
  UpdateIoPipeline(ShardedState* sharded, Device* device, size_t es, int depth, int64_t piece);

  // One optimizer step over `order`; with `write_params` the updated working
  // copies go to the group's param file (ShardedState::param_file).
  absl::Status Begin(std::vector<UpdatePiece> order, bool write_params);
  // The raw gradients of elements [begin, begin+len) of group g (dtype
  // es, device = host memory): the next piece in order comes from its read
  // ahead; any other is read now (after the reads in flight), and the
  // pipeline stops reading ahead for the rest of the step.
  absl::StatusOr<char*> Grads(int g, int64_t begin, int64_t len);
  // Where the update writes the working copy of the piece Grads returned
  // last (free once its buffer's previous write completed).
  absl::StatusOr<char*> WorkBuffer();
  // Queues the write of WorkBuffer()'s first len·es bytes to group g's
  // param file at element `begin`.
  void Land(int g, int64_t begin, int64_t len);
  // Waits for every read and write queued; the first error of the step
  // (naming the file). Idempotent.
  absl::Status Finish();

  int64_t buffer_bytes() const;

 private:
  ShardedState* sharded_;
  Device* device_;
  size_t es_;
  int depth_;
  int64_t piece_;
  // One in-order thread per direction (CommStream is the engine's
  // in-order task thread; nothing here is a collective).
  CommStream reader_{/*asynchronous=*/true}, writer_{/*asynchronous=*/true};
  std::vector<DeviceBuffer> grad_bufs_, work_bufs_;
  std::vector<CommStream::Handle> read_ticket_, write_ticket_;  // by buffer; null: none
  std::vector<UpdatePiece> order_;
  size_t next_ = 0;      // index in order_ of the piece Grads expects next
  size_t issued_ = 0;    // reads issued: order_[0, issued_)
  int64_t work_ = -1;    // buffer of the piece being updated
  int64_t writes_ = 0;   // working copies landed this step
  bool in_order_ = true;
  absl::Status first_;   // the step's first IO error
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_UPDATE_IO_PIPELINE_H_
