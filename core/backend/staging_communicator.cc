#include "core/backend/staging_communicator.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/forwarding_communicator.h"

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

// Every collective that moves buffers is staged; ForwardingCommunicator
// forwards the rest (barrier, abort) and wraps duplicates and splits.
class StagingCommunicator : public ForwardingCommunicator {
 public:
  // Owns `inner`.
  StagingCommunicator(std::unique_ptr<Communicator> inner, Device* device, bool on_device)
      : ForwardingCommunicator(std::move(inner)), device_(device), on_device_(on_device) {}
  // Borrows `inner`.
  StagingCommunicator(Communicator* inner, Device* device, bool on_device)
      : ForwardingCommunicator(inner), device_(device), on_device_(on_device) {}

  std::string backend_name() const override {
    return inner()->backend_name() + "+staging";
  }
  // The caller's buffers are in the other memory than the inner
  // communicator's: a host view of a device communicator (the control
  // channel) or a device view of a host one; neither is a device
  // communicator the engine binds to a stream (the copies synchronize).
  bool device_memory() const override { return false; }
  int device_ordinal() const override { return -1; }
  void set_wait_stream(void* stream) override { (void)stream; }

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

  absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
    Sync();
    const size_t es = DTypeSize(dtype);
    int64_t sent = 0, total_send = 0, total_recv = 0;
    for (int r = 0; r < static_cast<int>(send_counts.size()); ++r) {
      total_send += send_counts[r];
      if (r != rank()) sent += send_counts[r];
    }
    for (int64_t c : recv_counts) total_recv += c;
    Scratch in(device_, on_device_, total_send * es);
    Scratch out(device_, on_device_, total_recv * es);
    if (!in.ok() || !out.ok()) return NoMemory((total_send + total_recv) * es);
    if (total_send > 0) device_->Copy(in.data(), send, total_send * es);
    absl::Status s = Inner()->AllToAllV(in.data(), send_counts, out.data(), recv_counts, dtype);
    if (!s.ok()) return s;
    if (total_recv > 0) device_->Copy(recv, out.data(), total_recv * es);
    Count(CollectiveKind::kReduceScatter, sent, es);
    return absl::OkStatus();
  }

 protected:
  absl::StatusOr<std::unique_ptr<Communicator>> Rewrap(
      std::unique_ptr<Communicator> inner) override {
    return std::unique_ptr<Communicator>(
        std::make_unique<StagingCommunicator>(std::move(inner), device_, on_device_));
  }

 private:
  // The inner communicator's timeout follows ours.
  void Sync() { inner()->set_timeout_seconds(timeout_seconds_); }

  // Device-side staging is the control channel: its traffic is bookkeeping.
  struct InnerCall {
    InnerCall(Communicator* c, bool control)
        : scope(c, control ? CollectiveKind::kControl : c->counting_kind()), c(c) {}
    Communicator* operator->() { return c; }
    ScopedCountingKind scope;
    Communicator* c;
  };
  InnerCall Inner() { return InnerCall(inner(), on_device_); }

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

  Device* device_;
  bool on_device_;
};

}  // namespace

std::unique_ptr<Communicator> MakeStagingCommunicator(
    std::unique_ptr<Communicator> inner, Device* device) {
  return std::make_unique<StagingCommunicator>(std::move(inner), device,
                                               /*on_device=*/false);
}

std::unique_ptr<Communicator> MakeDeviceControlCommunicator(Communicator* inner,
                                                            Device* device) {
  return std::make_unique<StagingCommunicator>(inner, device,
                                               /*on_device=*/true);
}

}  // namespace zero
