#include "core/backend/staging_communicator.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace zero {
namespace {

// Scratch memory on the host or on the device, by the staging direction.
class Scratch {
 public:
  Scratch(Device* device, bool on_device, size_t bytes)
      : device_(device), on_device_(on_device) {
    if (on_device_) {
      auto p = device_->Allocate(bytes);
      ptr_ = p.ok() ? *p : nullptr;
      bytes_ = bytes;
    } else {
      host_.resize(bytes);
      ptr_ = host_.data();
    }
  }
  ~Scratch() {
    if (on_device_ && ptr_) device_->Free(ptr_, bytes_);
  }
  template <typename T = char>
  T* data() const { return static_cast<T*>(ptr_); }
  bool ok() const { return ptr_ != nullptr || bytes_ == 0; }

 private:
  Device* device_;
  bool on_device_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  std::vector<char> host_;
};

class StagingCommunicator : public Communicator {
 public:
  StagingCommunicator(std::unique_ptr<Communicator> owned, Communicator* inner,
                      Device* device, bool on_device)
      : owned_(std::move(owned)),
        inner_(owned_ ? owned_.get() : inner),
        device_(device),
        on_device_(on_device) {
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
    Scratch host(device_, on_device_, total * es);
    if (!host.ok()) return NoMemory(total * es);
    if (counts[rank()] > 0) {
      device_->Copy(host.data() + offset * es, send, counts[rank()] * es);
    }
    absl::Status s = Inner()->AllGatherV(host.data() + offset * es, host.data(), counts, dtype);
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
    Scratch in(device_, on_device_, total * sizeof(float));
    Scratch out(device_, on_device_, counts[rank()] * sizeof(float));
    if (!in.ok() || !out.ok()) return NoMemory(total * sizeof(float));
    if (total > 0) device_->Copy(in.data(), send, total * sizeof(float));
    absl::Status s = Inner()->ReduceScatterV(in.data<float>(), out.data<float>(), counts);
    if (!s.ok()) return s;
    if (counts[rank()] > 0) device_->Copy(recv, out.data(), counts[rank()] * sizeof(float));
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank()), sizeof(float));
    return absl::OkStatus();
  }

  absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                  const std::vector<int64_t>& counts, DType dtype) override {
    Sync();
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    Scratch in(device_, on_device_, total * 2);
    Scratch out(device_, on_device_, counts[rank()] * 2);
    if (!in.ok() || !out.ok()) return NoMemory(total * 2);
    if (total > 0) device_->Copy(in.data(), send, total * 2);
    absl::Status s = Inner()->ReduceScatterVHalf(in.data(), out.data(), counts, dtype);
    if (!s.ok()) return s;
    if (counts[rank()] > 0) device_->Copy(recv, out.data(), counts[rank()] * 2);
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank()), 2);
    return absl::OkStatus();
  }
  absl::Status AllReduceHalf(void* data, int64_t count, DType dtype) override {
    Sync();
    Scratch host(device_, on_device_, count * 2);
    if (!host.ok()) return NoMemory(count * 2);
    if (count > 0) device_->Copy(host.data(), data, count * 2);
    absl::Status s = Inner()->AllReduceHalf(host.data(), count, dtype);
    if (!s.ok()) return s;
    if (count > 0) device_->Copy(data, host.data(), count * 2);
    Count(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()), 2);
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
    Scratch host(device_, on_device_, bytes);
    if (!host.ok()) return NoMemory(bytes);
    if (bytes > 0) device_->Copy(host.data(), data, bytes);
    absl::Status s = Inner()->Broadcast(host.data(), bytes, root);
    if (!s.ok()) return s;
    if (bytes > 0) device_->Copy(data, host.data(), bytes);
    Count(CollectiveKind::kBroadcast, rank() == root ? bytes : 0, 1);
    return absl::OkStatus();
  }

  absl::Status Barrier() override { return inner_->Barrier(); }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }

  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override {
    auto d = inner_->Duplicate();
    if (!d.ok()) return d.status();
    return std::unique_ptr<Communicator>(std::make_unique<StagingCommunicator>(
        std::move(*d), nullptr, device_, on_device_));
  }

 private:
  // The inner communicator's timeout follows ours.
  void Sync() { inner_->set_timeout_seconds(timeout_seconds_); }

  // Device-side staging is the control channel: its traffic is bookkeeping.
  struct InnerCall {
    InnerCall(Communicator* c, bool control)
        : scope(c, control ? CollectiveKind::kControl : c->counting_kind()), c(c) {}
    Communicator* operator->() { return c; }
    ScopedCountingKind scope;
    Communicator* c;
  };
  InnerCall Inner() { return InnerCall(inner_, on_device_); }

  absl::Status NoMemory(size_t bytes) const {
    return absl::ResourceExhaustedError(
        absl::StrCat("staging communicator: cannot allocate ", bytes, " bytes"));
  }

  template <typename T>
  absl::Status AllReduceT(T* data, int64_t count, ReduceOp op) {
    Sync();
    Scratch host(device_, on_device_, count * sizeof(T));
    if (!host.ok()) return NoMemory(count * sizeof(T));
    if (count > 0) device_->Copy(host.data(), data, count * sizeof(T));
    absl::Status s = Inner()->AllReduce(host.data<T>(), count, op);
    if (!s.ok()) return s;
    if (count > 0) device_->Copy(data, host.data(), count * sizeof(T));
    Count(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()), sizeof(T));
    return absl::OkStatus();
  }

  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  Device* device_;
  bool on_device_;
};

}  // namespace

std::unique_ptr<Communicator> MakeStagingCommunicator(
    std::unique_ptr<Communicator> inner, Device* device) {
  return std::make_unique<StagingCommunicator>(std::move(inner), nullptr, device,
                                               /*on_device=*/false);
}

std::unique_ptr<Communicator> MakeDeviceControlCommunicator(Communicator* inner,
                                                            Device* device) {
  return std::make_unique<StagingCommunicator>(nullptr, inner, device,
                                               /*on_device=*/true);
}

}  // namespace zero
