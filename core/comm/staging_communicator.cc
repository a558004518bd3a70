#include "core/comm/staging_communicator.h"

#include <vector>

namespace zero {
namespace {

class StagingCommunicator : public Communicator {
 public:
  StagingCommunicator(std::unique_ptr<Communicator> inner, Device* device)
      : inner_(std::move(inner)), device_(device) {
    timeout_seconds_ = inner_->timeout_seconds();
  }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend_name() const override {
    return inner_->backend_name() + "+staging";
  }

  absl::Status AllGatherV(const void* send, void* recv,
                          const std::vector<int64_t>& counts,
                          DType dtype) override {
    Sync();
    const size_t es = DTypeSize(dtype);
    int64_t total = 0, offset = 0;
    for (int r = 0; r < world_size(); ++r) {
      if (r == rank()) offset = total;
      total += counts[r];
    }
    std::vector<char> host(total * es);
    if (counts[rank()] > 0) {
      device_->Copy(host.data() + offset * es, send, counts[rank()] * es);
    }
    absl::Status s = inner_->AllGatherV(host.data() + offset * es, host.data(), counts, dtype);
    if (!s.ok()) return s;
    if (total > 0) device_->Copy(recv, host.data(), total * es);
    Count(CollectiveKind::kAllGather, AllGatherSent(counts, rank()), es);
    return absl::OkStatus();
  }

  absl::Status ReduceScatterV(const float* send, float* recv,
                              const std::vector<int64_t>& counts) override {
    Sync();
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    std::vector<float> in(total), out(counts[rank()]);
    if (total > 0) device_->Copy(in.data(), send, total * sizeof(float));
    absl::Status s = inner_->ReduceScatterV(in.data(), out.data(), counts);
    if (!s.ok()) return s;
    if (!out.empty()) device_->Copy(recv, out.data(), out.size() * sizeof(float));
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank()), sizeof(float));
    return absl::OkStatus();
  }

  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    return AllReduceT(data, count, op);
  }
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override {
    return AllReduceT(data, count, op);
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    Sync();
    std::vector<char> host(bytes);
    if (bytes > 0) device_->Copy(host.data(), data, bytes);
    absl::Status s = inner_->Broadcast(host.data(), bytes, root);
    if (!s.ok()) return s;
    if (bytes > 0) device_->Copy(data, host.data(), bytes);
    Count(CollectiveKind::kBroadcast, rank() == root ? bytes : 0, 1);
    return absl::OkStatus();
  }

  absl::Status Barrier() override { return inner_->Barrier(); }

  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override {
    auto d = inner_->Duplicate();
    if (!d.ok()) return d.status();
    return MakeStagingCommunicator(std::move(*d), device_);
  }

 private:
  // The inner communicator's timeout follows ours.
  void Sync() { inner_->set_timeout_seconds(timeout_seconds_); }

  template <typename T>
  absl::Status AllReduceT(T* data, int64_t count, ReduceOp op) {
    Sync();
    std::vector<T> host(count);
    if (count > 0) device_->Copy(host.data(), data, count * sizeof(T));
    absl::Status s = inner_->AllReduce(host.data(), count, op);
    if (!s.ok()) return s;
    if (count > 0) device_->Copy(data, host.data(), count * sizeof(T));
    Count(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()), sizeof(T));
    return absl::OkStatus();
  }

  std::unique_ptr<Communicator> inner_;
  Device* device_;
};

}  // namespace

std::unique_ptr<Communicator> MakeStagingCommunicator(
    std::unique_ptr<Communicator> inner, Device* device) {
  return std::make_unique<StagingCommunicator>(std::move(inner), device);
}

}  // namespace zero
