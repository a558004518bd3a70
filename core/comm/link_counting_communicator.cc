#include "core/comm/link_counting_communicator.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace zero {

LinkCountingCommunicator::LinkCountingCommunicator(std::unique_ptr<Communicator> inner,
                                                   std::vector<int> node_of,
                                                   std::shared_ptr<LinkCounters> links)
    : ForwardingCommunicator(std::move(inner)),
      node_of_(std::move(node_of)),
      links_(std::move(links)) {}

int LinkCountingCommunicator::PeersOnMyNode() const {
  int n = 0;
  for (int r = 0; r < world_size(); ++r) n += r != rank() && node_of_[r] == node_of_[rank()];
  return n;
}

void LinkCountingCommunicator::CountPeers(CollectiveKind own, const std::vector<int64_t>& values,
                                          const std::vector<int64_t>& bytes) {
  const CollectiveKind k = Kind(own);
  int64_t total_values = 0, total_bytes = 0;
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank()) continue;
    const Link l = node_of_[r] == node_of_[rank()] ? Link::kIntra : Link::kInter;
    links_->Add(k, l, values[r], bytes[r]);
    total_values += values[r];
    total_bytes += bytes[r];
  }
  CommCounters& c = counters();
  c.sent[static_cast<int>(k)] += total_values;
  c.sent_bytes[static_cast<int>(k)] += total_bytes;
  c.calls += 1;
}

void LinkCountingCommunicator::CountShared(CollectiveKind own, int64_t total,
                                           int64_t elem_bytes) {
  const int w = world_size();
  const int64_t intra = w <= 1 ? 0 : total * PeersOnMyNode() / (w - 1);
  const CollectiveKind k = Kind(own);
  links_->Add(k, Link::kIntra, intra, intra * elem_bytes);
  links_->Add(k, Link::kInter, total - intra, (total - intra) * elem_bytes);
  Count(own, total, static_cast<size_t>(elem_bytes));
}

absl::Status LinkCountingCommunicator::AllGatherV(const void* send, void* recv,
                                                  const std::vector<int64_t>& counts,
                                                  DType dtype) {
  if (auto s = inner()->AllGatherV(send, recv, counts, dtype); !s.ok()) return s;
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  std::vector<int64_t> bytes(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) bytes[r] = counts[r] * es;
  CountPeers(CollectiveKind::kAllGather, counts, bytes);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::ReduceScatterV(const float* send, float* recv,
                                                      const std::vector<int64_t>& counts) {
  if (auto s = inner()->ReduceScatterV(send, recv, counts); !s.ok()) return s;
  std::vector<int64_t> bytes(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) bytes[r] = counts[r] * 4;
  CountPeers(CollectiveKind::kReduceScatter, counts, bytes);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::ReduceScatterVHalf(const void* send, void* recv,
                                                          const std::vector<int64_t>& counts,
                                                          DType dtype) {
  if (auto s = inner()->ReduceScatterVHalf(send, recv, counts, dtype); !s.ok()) return s;
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  std::vector<int64_t> bytes(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) bytes[r] = counts[r] * es;
  CountPeers(CollectiveKind::kReduceScatter, counts, bytes);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::AllReduceHalf(void* data, int64_t count, DType dtype) {
  if (auto s = inner()->AllReduceHalf(data, count, dtype); !s.ok()) return s;
  CountShared(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()),
              static_cast<int64_t>(DTypeSize(dtype)));
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  if (auto s = inner()->AllReduce(data, count, op); !s.ok()) return s;
  CountShared(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()), 4);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::AllReduce(double* data, int64_t count, ReduceOp op) {
  if (auto s = inner()->AllReduce(data, count, op); !s.ok()) return s;
  CountShared(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()), 8);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  if (auto s = inner()->Broadcast(data, bytes, root); !s.ok()) return s;
  CountShared(CollectiveKind::kBroadcast, rank() == root ? bytes : 0, 1);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::AllToAllV(const void* send,
                                                 const std::vector<int64_t>& send_counts,
                                                 void* recv,
                                                 const std::vector<int64_t>& recv_counts,
                                                 DType dtype) {
  if (auto s = inner()->AllToAllV(send, send_counts, recv, recv_counts, dtype); !s.ok()) {
    return s;
  }
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  std::vector<int64_t> bytes(send_counts.size());
  for (size_t r = 0; r < send_counts.size(); ++r) bytes[r] = send_counts[r] * es;
  CountPeers(CollectiveKind::kReduceScatter, send_counts, bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> LinkCountingCommunicator::Rewrap(
    std::unique_ptr<Communicator> inner) {
  return std::unique_ptr<Communicator>(
      std::make_unique<LinkCountingCommunicator>(std::move(inner), node_of_, links_));
}

absl::StatusOr<std::unique_ptr<LinkCountingCommunicator>> LinkCountingCommunicator::SplitBy(
    const SplitSpec& spec) {
  const int me = rank();
  if (static_cast<int>(spec.color.size()) != world_size() ||
      static_cast<int>(spec.key.size()) != world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split: ", spec.color.size(), " colors for ", world_size(), " ranks"));
  }
  inner()->set_timeout_seconds(timeout_seconds_);
  auto sub = inner()->Split(spec.color[me], spec.key[me]);
  if (!sub.ok()) return sub.status();
  const std::vector<int> members = SplitMembers(spec, me);
  const int n = static_cast<int>(members.size());
  int pos = 0;
  while (members[pos] != me) ++pos;
  if ((*sub)->world_size() != n || (*sub)->rank() != pos) {
    return absl::InternalError(absl::StrCat(
        "split: the ", (*sub)->backend_name(), " communicator made rank ", me, " rank ",
        (*sub)->rank(), " of ", (*sub)->world_size(), "; color ", spec.color[me], ", key ",
        spec.key[me], " give rank ", pos, " of ", n, " (core/comm/topology.h SplitMembers)"));
  }
  std::vector<int> nodes(n);
  for (int i = 0; i < n; ++i) nodes[i] = node_of_[members[i]];
  (*sub)->set_timeout_seconds(timeout_seconds_);
  return std::make_unique<LinkCountingCommunicator>(std::move(*sub), std::move(nodes), links_);
}

absl::StatusOr<std::unique_ptr<Communicator>> LinkCountingCommunicator::Split(int color,
                                                                              int key) {
  if (device_memory()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "split: the ", backend_name(), " communicator moves device memory; split it with "
        "LinkCountingCommunicator::SplitBy (every rank's color and key known)"));
  }
  // Every rank's (color, key), as MPI_Comm_split exchanges them (control
  // traffic on the inner communicator, not counted as model state).
  const int w = world_size();
  // Moved as 2-byte units: two int32 per rank.
  std::vector<int32_t> mine{color, key}, all(2 * w);
  inner()->set_timeout_seconds(timeout_seconds_);
  if (auto s = inner()->AllGatherV(mine.data(), all.data(), std::vector<int64_t>(w, 4),
                                   DType::kF16);
      !s.ok()) {
    return s;
  }
  SplitSpec spec;
  for (int r = 0; r < w; ++r) {
    spec.color.push_back(all[2 * r]);
    spec.key.push_back(all[2 * r + 1]);
  }
  auto sub = SplitBy(spec);
  if (!sub.ok()) return sub.status();
  return std::unique_ptr<Communicator>(std::move(*sub));
}

}  // namespace zero
