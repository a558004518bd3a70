// Traffic per link (docs/ARCHITECTURE.md, "Traffic per link"): a
// communicator that forwards every call to the one it wraps
// (ForwardingCommunicator) and files what
// this rank sent under intra-node or inter-node, per collective kind, in
// LinkCounters shared by all the communicators of one engine (its world or
// shard group, node, cross-node, replica and hpZ groups). Per peer, the
// model is the ZeRO paper's: an all-gather of pieces counts[r] receives
// counts[r] from each peer r; a reduce-scatter sends counts[r] to each peer
// r; an all-to-all sends send_counts[r]; an all-reduce of n is a
// reduce-scatter plus an all-gather, 2n(W-1)/W, of which 2n(L-1)/W reach
// the L-1 peers on this rank's node; a broadcast's root sends its bytes
// once, split in the same proportion. A link is intra-node when both ranks
// are on the same node (core/comm/topology.h). Sums over links equal the
// plain counters (Communicator::counters()), which this class keeps too.
#ifndef ZERO_CORE_COMM_LINK_COUNTING_COMMUNICATOR_H_
#define ZERO_CORE_COMM_LINK_COUNTING_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/forwarding_communicator.h"
#include "core/comm/topology.h"

namespace zero {

enum class Link { kIntra = 0, kInter = 1 };

struct LinkCounters {
  static constexpr int kKinds = static_cast<int>(CollectiveKind::kCount);
  std::atomic<int64_t> elems[kKinds][2] = {};
  std::atomic<int64_t> bytes[kKinds][2] = {};
  void Add(CollectiveKind k, Link l, int64_t n, int64_t b) {
    elems[static_cast<int>(k)][static_cast<int>(l)] += n;
    bytes[static_cast<int>(k)][static_cast<int>(l)] += b;
  }
  int64_t Bytes(CollectiveKind k, Link l) const {
    return bytes[static_cast<int>(k)][static_cast<int>(l)].load();
  }
  int64_t Elems(CollectiveKind k, Link l) const {
    return elems[static_cast<int>(k)][static_cast<int>(l)].load();
  }
};

class LinkCountingCommunicator : public ForwardingCommunicator {
 public:
  // node_of[r]: the node of this communicator's rank r.
  LinkCountingCommunicator(std::unique_ptr<Communicator> inner, std::vector<int> node_of,
                           std::shared_ptr<LinkCounters> links);

  const std::vector<int>& node_of() const { return node_of_; }
  const std::shared_ptr<LinkCounters>& links() const { return links_; }

  // For payloads that are not `elems` of one dtype (quantized blocks): sent
  // to peer r, values[r] values in bytes[r] bytes, filed under `own` (or the
  // scoped counting kind).
  void CountPeers(CollectiveKind own, const std::vector<int64_t>& values,
                  const std::vector<int64_t>& bytes);

  // COLLECTIVE. The sub-communicator of this rank in `spec` (every rank's
  // color and key, core/comm/topology.h), split from the inner one
  // (MPI_Comm_split, ncclCommSplit, thread groups) with no exchange of its
  // own: the members' nodes come from SplitMembers, so it works over device
  // communicators too. A backend whose split ranks differently from
  // SplitMembers is an error, not a silently wrong node map.
  absl::StatusOr<std::unique_ptr<LinkCountingCommunicator>> SplitBy(const SplitSpec& spec);

  absl::Status AllGatherV(const void* send, void* recv, const std::vector<int64_t>& counts,
                          DType dtype) override;
  absl::Status ReduceScatterV(const float* send, float* recv,
                              const std::vector<int64_t>& counts) override;
  // communication_data_type fp16/bf16: 2-byte elements, counted as such.
  absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                  const std::vector<int64_t>& counts, DType dtype) override;
  absl::Status AllReduceHalf(void* data, int64_t count, DType dtype) override;
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override;
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override;
  absl::Status Broadcast(void* data, int64_t bytes, int root) override;
  // Any (color, key): the pairs are all-gathered over the inner
  // communicator first (host memory; over a device communicator use
  // SplitBy).
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override;
  absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override;

 protected:
  absl::StatusOr<std::unique_ptr<Communicator>> Rewrap(
      std::unique_ptr<Communicator> inner) override;

 private:
  CollectiveKind Kind(CollectiveKind own) const {
    return counting_kind() == CollectiveKind::kCount ? own : counting_kind();
  }
  int PeersOnMyNode() const;  // excluding this rank
  void CountShared(CollectiveKind own, int64_t total, int64_t elem_bytes);

  std::vector<int> node_of_;
  std::shared_ptr<LinkCounters> links_;
};

}  // namespace zero

#endif  // ZERO_CORE_COMM_LINK_COUNTING_COMMUNICATOR_H_
