// qgZ (zero_quantized_gradients; docs/ARCHITECTURE.md, "Nodes, hybrid
// sharding and ZeRO++"): a reduce-scatter of fp32 pieces done
// hierarchically, full precision inside a node and block-quantized across
// nodes:
//   1. inside the node (Hierarchy::node, fp32 ReduceScatterV): the rank of
//      local rank l receives its node's sum of the pieces of every rank of
//      local rank l (one per node);
//   2. across nodes (Hierarchy::cross, all-to-all): it quantizes the piece
//      of each other node's rank (int8 or int4 blocks, fp32 scales) and
//      sends it there, receiving the other nodes' sums of its own piece;
//   3. its piece is the sum over nodes in node order, in fp32: the other
//      nodes' dequantized, its own node's exact.
// With error feedback (default on) each rank carries what quantization lost
// into its next message to the same node for the same shard elements, so
// the error does not accumulate over steps (//tests:multinode_test reports
// int4 with and without it).
// With one node nothing is quantized (no cross-node hop); a block holding
// inf/NaN stays non-finite (kernels/quant_math.h).
#ifndef ZERO_CORE_ENGINE_QUANTIZED_REDUCE_H_
#define ZERO_CORE_ENGINE_QUANTIZED_REDUCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/device/device.h"
#include "core/engine/engine_context.h"

namespace zero {

// Where a run of a piece's values lives in its rank's gradient shard:
// group g, elements [offset, offset + numel) of the shard.
struct ShardSegment {
  int group;
  int64_t offset, numel;
};

class QuantizedReduceScatter {
 public:
  explicit QuantizedReduceScatter(EngineContext* ctx) : ctx_(ctx) {}

  // As Communicator::ReduceScatterV over ctx.comm (pieces in rank order),
  // `recv` receiving this rank's reduced piece. Device memory.
  // segments[r]: rank r's piece as runs of its shard (for error feedback).
  absl::Status Run(float* send, float* recv, const std::vector<int64_t>& counts,
                   const std::vector<std::vector<ShardSegment>>& segments);

  int64_t buffer_bytes() const;

 private:
  // Error feedback (zero_quantized_gradients_error_feedback): what
  // quantizing a value for node m lost is added to the value sent to the
  // same shard element of node m next time. A residual that is not finite
  // (an overflowing step) is dropped.
  absl::Status Feedback(int m, const std::vector<ShardSegment>& segs, float* piece, int64_t n,
                        bool before);

  EngineContext* ctx_;
  DeviceBuffer reordered_, partial_, out_, in_, deq_;  // grown on demand
  std::vector<std::vector<DeviceBuffer>> residual_;    // [node][group], shard-sized
  char* out_cursor_ = nullptr;                         // the packed piece being sent
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_QUANTIZED_REDUCE_H_
