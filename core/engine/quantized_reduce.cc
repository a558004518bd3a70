#include "core/engine/quantized_reduce.h"

#include <algorithm>
#include <cmath>

#include "core/common/status_macros.h"
#include "core/engine/hierarchy.h"
#include "kernels/quant_math.h"

namespace zero {
namespace {

absl::Status Grow(Device* d, DeviceBuffer* b, size_t bytes) {
  if (b->bytes() >= bytes) return absl::OkStatus();
  b->Reset();
  ASSIGN_OR_RETURN(*b, DeviceBuffer::Make(d, std::max<size_t>(bytes, 64)));
  return absl::OkStatus();
}

}  // namespace

int64_t QuantizedReduceScatter::buffer_bytes() const {
  int64_t n = static_cast<int64_t>(reordered_.bytes() + partial_.bytes() + out_.bytes() +
                                   in_.bytes() + deq_.bytes());
  for (const auto& v : residual_) {
    for (const DeviceBuffer& b : v) n += static_cast<int64_t>(b.bytes());
  }
  return n;
}

absl::Status QuantizedReduceScatter::Feedback(int m, const std::vector<ShardSegment>& segs,
                                              float* piece, int64_t n, bool before) {
  Device* d = ctx_->device;
  const int bits = ctx_->config.quantized_gradients_bits;
  const int block = ctx_->config.quantization_block_size;
  if (residual_.empty()) residual_.resize(ctx_->hier->topology().nodes);
  std::vector<DeviceBuffer>& res = residual_[m];
  if (res.empty()) {
    for (const LayoutGroup& g : ctx_->layout.groups()) {
      ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Make(d, std::max<int64_t>(g.shard, 1) * 4));
      d->Memset0(b.data(), b.bytes());
      res.push_back(std::move(b));
    }
  }
  if (before) {  // piece += residual
    int64_t at = 0;
    for (const ShardSegment& s : segs) {
      d->AccumulateF32(piece + at, res[s.group].data<float>() + s.offset, 1.0f, DType::kF32,
                       s.numel);
      at += s.numel;
    }
    return absl::OkStatus();
  }
  // residual = piece - dequantized(piece)
  RETURN_IF_ERROR(Grow(d, &deq_, static_cast<size_t>(n) * 4));
  d->Dequantize(out_cursor_, n, bits, block, deq_.data<float>(), false);
  double sumsq = 0.0;
  int64_t at = 0;
  for (const ShardSegment& s : segs) {
    float* r = res[s.group].data<float>() + s.offset;
    d->Copy(r, piece + at, s.numel * 4);
    d->AccumulateF32(r, deq_.data<float>() + at, -1.0f, DType::kF32, s.numel);
    sumsq += d->SumSquares(r, DType::kF32, s.numel);
    at += s.numel;
  }
  if (!std::isfinite(sumsq)) {
    for (const ShardSegment& s : segs) {
      d->Memset0(res[s.group].data<float>() + s.offset, s.numel * 4);
    }
  }
  return absl::OkStatus();
}

absl::Status QuantizedReduceScatter::Run(float* send, float* recv,
                                         const std::vector<int64_t>& counts,
                                         const std::vector<std::vector<ShardSegment>>& segments) {
  Device* d = ctx_->device;
  const Hierarchy& h = *ctx_->hier;
  const Topology& t = h.topology();
  LinkCountingCommunicator* node = h.node();
  LinkCountingCommunicator* cross = h.cross();
  const int world = ctx_->world, me = ctx_->rank;
  const int nodes = t.nodes, local = node->world_size();
  const int my_node = t.node(), my_local = t.local_rank[me];
  const int bits = ctx_->config.quantized_gradients_bits;
  const int block = ctx_->config.quantization_block_size;
  // rank_at[m][l]: the rank of local rank l on node m.
  std::vector<std::vector<int>> rank_at(nodes);
  for (int m = 0; m < nodes; ++m) rank_at[m] = t.RanksOnNode(m);
  std::vector<int64_t> offset(world + 1, 0);
  for (int r = 0; r < world; ++r) offset[r + 1] = offset[r] + counts[r];

  // 1. Inside the node: chunk l = the pieces of local rank l's ranks, in
  // node order; reduce-scattered in fp32.
  RETURN_IF_ERROR(Grow(d, &reordered_, static_cast<size_t>(offset[world]) * 4));
  std::vector<int64_t> node_counts(local, 0);
  int64_t at = 0;
  for (int l = 0; l < local; ++l) {
    for (int m = 0; m < nodes; ++m) {
      const int r = rank_at[m][l];
      if (counts[r] > 0) d->Copy(reordered_.data<float>() + at, send + offset[r], counts[r] * 4);
      at += counts[r];
      node_counts[l] += counts[r];
    }
  }
  RETURN_IF_ERROR(Grow(d, &partial_, static_cast<size_t>(node_counts[my_local]) * 4));
  float* partial = partial_.data<float>();
  RETURN_IF_ERROR(node->ReduceScatterV(reordered_.data<float>(), partial, node_counts));

  // 2. Across nodes: piece of node m's rank quantized and sent to node m.
  std::vector<int64_t> send_values(nodes, 0), send_bytes(nodes, 0), send_units(nodes, 0);
  std::vector<int64_t> recv_units(nodes, 0), recv_at(nodes + 1, 0), send_at(nodes + 1, 0);
  std::vector<int64_t> part_at(nodes + 1, 0);
  for (int m = 0; m < nodes; ++m) {
    const int64_t n = counts[rank_at[m][my_local]];
    part_at[m + 1] = part_at[m] + n;
    if (m != my_node) {
      send_values[m] = n;
      send_bytes[m] = math::QuantPackedBytes(n, bits, block);
      send_units[m] = send_bytes[m] / 2;
      recv_units[m] = math::QuantPackedBytes(counts[me], bits, block) / 2;
    }
    send_at[m + 1] = send_at[m] + send_bytes[m];
    recv_at[m + 1] = recv_at[m] + recv_units[m] * 2;
  }
  RETURN_IF_ERROR(Grow(d, &out_, static_cast<size_t>(send_at[nodes])));
  RETURN_IF_ERROR(Grow(d, &in_, static_cast<size_t>(recv_at[nodes])));
  const bool feedback = ctx_->config.quantized_gradients_error_feedback;
  for (int m = 0; m < nodes; ++m) {
    if (m == my_node || send_values[m] == 0) continue;
    float* piece = partial + part_at[m];
    const std::vector<ShardSegment>& segs = segments[rank_at[m][my_local]];
    if (feedback) RETURN_IF_ERROR(Feedback(m, segs, piece, send_values[m], true));
    out_cursor_ = out_.data<char>() + send_at[m];
    d->Quantize(piece, send_values[m], bits, block, out_cursor_);
    if (feedback) RETURN_IF_ERROR(Feedback(m, segs, piece, send_values[m], false));
  }
  if (nodes > 1) {
    RETURN_IF_ERROR(cross->inner()->AllToAllV(out_.data(), send_units, in_.data(), recv_units,
                                              DType::kF16));
    cross->CountPeers(CollectiveKind::kReduceScatter, send_values, send_bytes);
  }

  // 3. Sum over nodes in node order, fp32.
  const int64_t n = counts[me];
  const float* own = partial + part_at[my_node];
  for (int m = 0; m < nodes; ++m) {
    if (m == my_node) {
      if (m == 0) {
        if (n > 0) d->Copy(recv, own, n * 4);
      } else {
        d->AccumulateF32(recv, own, 1.0f, DType::kF32, n);
      }
    } else {
      d->Dequantize(in_.data<char>() + recv_at[m], n, bits, block, recv, m != 0);
    }
  }
  return absl::OkStatus();
}

}  // namespace zero
