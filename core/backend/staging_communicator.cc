#include "core/backend/staging_communicator.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/forwarding_communicator.h"

namespace zero {
namespace {

// Host staging memory kept between collectives, page-locked where the
// device pins: a pageable copy runs at a fraction of the link's speed and a
// fresh buffer faults in every page on every call (measured on an H200: 185
// ms for a 32M-param stage-2 step at world 1 through per-call vectors).
// Grown to the largest collective staged, so the peak is what per-call
// buffers had; it is held, not freed, between steps.
class HostSlot {
 public:
  explicit HostSlot(Device* device) : device_(device) {}
  ~HostSlot() {
    if (ptr_ != nullptr) device_->FreeHost(ptr_, /*pinned=*/true);
  }
  HostSlot(const HostSlot&) = delete;
  HostSlot& operator=(const HostSlot&) = delete;
  void* Get(size_t bytes) {
    if (bytes > capacity_) {
      if (ptr_ != nullptr) device_->FreeHost(ptr_, /*pinned=*/true);
      ptr_ = nullptr;
      capacity_ = 0;
      auto p = device_->AllocateHost(bytes, /*pinned=*/true);
      if (!p.ok()) return nullptr;
      ptr_ = *p;
      capacity_ = bytes;
    }
    return ptr_;
  }

 private:
  Device* device_;
  void* ptr_ = nullptr;
  size_t capacity_ = 0;
};

// Scratch memory on the host (a kept slot) or on the device (the control
// channel's few scalars: allocated per call), by the staging direction.
class Scratch {
 public:
  Scratch(Device* device, bool on_device, HostSlot* slot, size_t bytes)
      : device_(device), on_device_(on_device), bytes_(bytes) {
    if (on_device_) {
      auto p = device_->Allocate(bytes);
      ptr_ = p.ok() ? *p : nullptr;
    } else {
      ptr_ = slot->Get(bytes);
    }
  }
  ~Scratch() {
    if (on_device_ && ptr_) device_->Free(ptr_, bytes_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T = char>
  T* data() const { return static_cast<T*>(ptr_); }
  bool ok() const { return ptr_ != nullptr || bytes_ == 0; }

 private:
  Device* device_;
  bool on_device_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Every collective that moves buffers is staged; ForwardingCommunicator
// forwards the rest (barrier, abort) and wraps duplicates and splits.
class StagingCommunicator : public ForwardingCommunicator {
 public:
  // Owns `inner`.
  StagingCommunicator(std::unique_ptr<Communicator> inner, Device* device, bool on_device)
      : ForwardingCommunicator(std::move(inner)),
        device_(device),
        on_device_(on_device),
        slot_in_(device),
        slot_out_(device) {}
  // Borrows `inner`.
  StagingCommunicator(Communicator* inner, Device* device, bool on_device)
      : ForwardingCommunicator(inner),
        device_(device),
        on_device_(on_device),
        slot_in_(device),
        slot_out_(device) {}

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
    if (Local()) {
      const size_t es1 = DTypeSize(dtype);
      LocalCopy(recv, send, counts[0] * es1);
      Count(CollectiveKind::kAllGather, AllGatherSent(counts, rank()), es1);
      return absl::OkStatus();
    }
    const size_t es = DTypeSize(dtype);
    int64_t total = 0, offset = 0;
    for (int r = 0; r < world_size(); ++r) {
      if (r == rank()) offset = total;
      total += counts[r];
    }
    Scratch host(device_, on_device_, &slot_in_, total * es);
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
    if (Local()) {
      LocalCopy(recv, send, counts[0] * sizeof(float));
      Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank()), sizeof(float));
      return absl::OkStatus();
    }
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    Scratch in(device_, on_device_, &slot_in_, total * sizeof(float));
    Scratch out(device_, on_device_, &slot_out_, counts[rank()] * sizeof(float));
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
    if (Local()) {
      LocalCopy(recv, send, counts[0] * 2);
      Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank()), 2);
      return absl::OkStatus();
    }
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    Scratch in(device_, on_device_, &slot_in_, total * 2);
    Scratch out(device_, on_device_, &slot_out_, counts[rank()] * 2);
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
    if (Local()) {
      Count(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()), 2);
      return absl::OkStatus();
    }
    Scratch host(device_, on_device_, &slot_in_, count * 2);
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
    if (Local()) {
      Count(CollectiveKind::kBroadcast, rank() == root ? bytes : 0, 1);
      return absl::OkStatus();
    }
    Scratch host(device_, on_device_, &slot_in_, bytes);
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
    if (Local()) {
      LocalCopy(recv, send, send_counts[0] * DTypeSize(dtype));
      Count(CollectiveKind::kReduceScatter, 0, DTypeSize(dtype));
      return absl::OkStatus();
    }
    const size_t es = DTypeSize(dtype);
    int64_t sent = 0, total_send = 0, total_recv = 0;
    for (int r = 0; r < static_cast<int>(send_counts.size()); ++r) {
      total_send += send_counts[r];
      if (r != rank()) sent += send_counts[r];
    }
    for (int64_t c : recv_counts) total_recv += c;
    Scratch in(device_, on_device_, &slot_in_, total_send * es);
    Scratch out(device_, on_device_, &slot_out_, total_recv * es);
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

  // One rank over device buffers: every collective is the identity, so the
  // bytes stay on the device (a device copy where the output is elsewhere)
  // instead of a round trip through the host.
  bool Local() const { return !on_device_ && world_size() == 1; }
  void LocalCopy(void* dst, const void* src, size_t bytes) {
    if (bytes > 0 && dst != src) device_->Copy(dst, src, bytes);
  }

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
    if (Local()) {
      Count(CollectiveKind::kAllReduce, AllReduceSent(count, world_size()), sizeof(T));
      return absl::OkStatus();
    }
    Scratch host(device_, on_device_, &slot_in_, count * sizeof(T));
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
  HostSlot slot_in_, slot_out_;  // host staging (on_device_ false)
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
