#include "core/comm/link_counting_communicator.h"

#include <utility>

namespace zero {

LinkCountingCommunicator::LinkCountingCommunicator(std::unique_ptr<Communicator> inner,
                                                   std::vector<int> node_of,
                                                   std::shared_ptr<LinkCounters> links)
    : inner_(std::move(inner)), node_of_(std::move(node_of)), links_(std::move(links)) {
  timeout_seconds_ = inner_->timeout_seconds();
}

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
  if (auto s = inner_->AllGatherV(send, recv, counts, dtype); !s.ok()) return s;
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  std::vector<int64_t> bytes(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) bytes[r] = counts[r] * es;
  CountPeers(CollectiveKind::kAllGather, counts, bytes);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::ReduceScatterV(const float* send, float* recv,
                                                      const std::vector<int64_t>& counts) {
  if (auto s = inner_->ReduceScatterV(send, recv, counts); !s.ok()) return s;
  std::vector<int64_t> bytes(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) bytes[r] = counts[r] * 4;
  CountPeers(CollectiveKind::kReduceScatter, counts, bytes);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::ReduceScatterVHalf(const void* send, void* recv,
                                                          const std::vector<int64_t>& counts,
                                                          DType dtype) {
  if (auto s = inner_->ReduceScatterVHalf(send, recv, counts, dtype); !s.ok()) return s;
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  std::vector<int64_t> bytes(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) bytes[r] = counts[r] * es;
  CountPeers(CollectiveKind::kReduceScatter, counts, bytes);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::AllReduceHalf(void* data, int64_t count, DType dtype) {
  if (auto s = inner_->AllReduceHalf(data, count, dtype); !s.ok()) return s;
  CountShared(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()),
              static_cast<int64_t>(DTypeSize(dtype)));
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  if (auto s = inner_->AllReduce(data, count, op); !s.ok()) return s;
  CountShared(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()), 4);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::AllReduce(double* data, int64_t count, ReduceOp op) {
  if (auto s = inner_->AllReduce(data, count, op); !s.ok()) return s;
  CountShared(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()), 8);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  if (auto s = inner_->Broadcast(data, bytes, root); !s.ok()) return s;
  CountShared(CollectiveKind::kBroadcast, rank() == root ? bytes : 0, 1);
  return absl::OkStatus();
}

absl::Status LinkCountingCommunicator::AllToAllV(const void* send,
                                                 const std::vector<int64_t>& send_counts,
                                                 void* recv,
                                                 const std::vector<int64_t>& recv_counts,
                                                 DType dtype) {
  if (auto s = inner_->AllToAllV(send, send_counts, recv, recv_counts, dtype); !s.ok()) {
    return s;
  }
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  std::vector<int64_t> bytes(send_counts.size());
  for (size_t r = 0; r < send_counts.size(); ++r) bytes[r] = send_counts[r] * es;
  CountPeers(CollectiveKind::kReduceScatter, send_counts, bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> LinkCountingCommunicator::Duplicate() {
  auto d = inner_->Duplicate();
  if (!d.ok()) return d.status();
  return std::unique_ptr<Communicator>(
      std::make_unique<LinkCountingCommunicator>(std::move(*d), node_of_, links_));
}

absl::StatusOr<std::unique_ptr<Communicator>> LinkCountingCommunicator::Split(int color,
                                                                              int key) {
  auto sub = inner_->Split(color, key);
  if (!sub.ok()) return sub.status();
  // Which of our ranks the new ranks are: each says its rank here (control
  // traffic, not counted as model state).
  const int n = (*sub)->world_size();
  std::vector<float> mine(1, static_cast<float>(rank())), all(n);
  if (auto s = (*sub)->AllGatherV(mine.data(), all.data(), std::vector<int64_t>(n, 1),
                                  DType::kF32);
      !s.ok()) {
    return s;
  }
  std::vector<int> nodes(n);
  for (int i = 0; i < n; ++i) nodes[i] = node_of_[static_cast<int>(all[i])];
  (*sub)->set_timeout_seconds(timeout_seconds_);
  return std::unique_ptr<Communicator>(
      std::make_unique<LinkCountingCommunicator>(std::move(*sub), std::move(nodes), links_));
}

}  // namespace zero
