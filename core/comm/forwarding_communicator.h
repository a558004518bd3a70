// A communicator that forwards every virtual of Communicator to an inner
// one, so a wrapper (traffic per link, the comms log, the staging and
// stand-in communicators) overrides only what it changes. Hand-forwarding
// each call let a wrapper fall back to Communicator's Unimplemented default
// when a new virtual was added (the half-precision reductions of
// communication_data_type, commit 6542456); deriving from this class, a new
// virtual is forwarded by adding it here once.
//
// What a forwarded call does here:
//  - the inner communicator runs it under this wrapper's timeout and
//    counting kind (ScopedCountingKind on the wrapper reaches the inner);
//  - what the inner counted is added to this wrapper's counters, so
//    counters() read through any stack of wrappers equal the backend's;
//  - Duplicate and Split wrap the inner's result with Rewrap, so a wrapper
//    never silently returns an unwrapped communicator.
#ifndef ZERO_CORE_COMM_FORWARDING_COMMUNICATOR_H_
#define ZERO_CORE_COMM_FORWARDING_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/comm/communicator.h"

namespace zero {

class ForwardingCommunicator : public Communicator {
 public:
  // Owns `inner`.
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> inner)
      : owned_(std::move(inner)), inner_(owned_.get()) {
    timeout_seconds_ = inner_->timeout_seconds();
  }
  // Borrows `inner`, which must outlive this communicator.
  explicit ForwardingCommunicator(Communicator* inner) : inner_(inner) {
    timeout_seconds_ = inner_->timeout_seconds();
  }

  Communicator* inner() const { return inner_; }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend_name() const override { return inner_->backend_name(); }
  bool device_memory() const override { return inner_->device_memory(); }
  int device_ordinal() const override { return inner_->device_ordinal(); }
  void set_wait_stream(void* stream) override { inner_->set_wait_stream(stream); }

  absl::Status AllGatherV(const void* send, void* recv, const std::vector<int64_t>& counts,
                          DType dtype) override {
    return Forward([&] { return inner_->AllGatherV(send, recv, counts, dtype); });
  }
  absl::Status ReduceScatterV(const float* send, float* recv,
                              const std::vector<int64_t>& counts) override {
    return Forward([&] { return inner_->ReduceScatterV(send, recv, counts); });
  }
  absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                  const std::vector<int64_t>& counts, DType dtype) override {
    return Forward([&] { return inner_->ReduceScatterVHalf(send, recv, counts, dtype); });
  }
  absl::Status AllReduceHalf(void* data, int64_t count, DType dtype) override {
    return Forward([&] { return inner_->AllReduceHalf(data, count, dtype); });
  }
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    return Forward([&] { return inner_->AllReduce(data, count, op); });
  }
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override {
    return Forward([&] { return inner_->AllReduce(data, count, op); });
  }
  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    return Forward([&] { return inner_->Broadcast(data, bytes, root); });
  }
  absl::Status Barrier() override {
    return Forward([&] { return inner_->Barrier(); });
  }
  absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
    return Forward(
        [&] { return inner_->AllToAllV(send, send_counts, recv, recv_counts, dtype); });
  }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }

  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override {
    inner_->set_timeout_seconds(timeout_seconds_);
    auto d = inner_->Duplicate();
    if (!d.ok()) return d.status();
    return Rewrap(std::move(*d));
  }
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override {
    inner_->set_timeout_seconds(timeout_seconds_);
    auto s = inner_->Split(color, key);
    if (!s.ok()) return s.status();
    return Rewrap(std::move(*s));
  }

 protected:
  // This wrapper around `inner` (a duplicate or a split of inner()), with
  // the same settings (timeout, wait stream, ...).
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Rewrap(
      std::unique_ptr<Communicator> inner) = 0;

  // Runs `call` on the inner communicator under this one's timeout and
  // counting kind, and adds what the inner counted to this one's counters.
  template <typename Fn>
  absl::Status Forward(Fn call) {
    inner_->set_timeout_seconds(timeout_seconds_);
    CommCounters& in = inner_->counters();
    constexpr int kKinds = static_cast<int>(CollectiveKind::kCount);
    int64_t sent[kKinds], bytes[kKinds];
    for (int k = 0; k < kKinds; ++k) {
      sent[k] = in.sent[k];
      bytes[k] = in.sent_bytes[k];
    }
    const int64_t calls = in.calls;
    absl::Status s;
    {
      ScopedCountingKind kind(inner_, counting_kind());
      s = call();
    }
    CommCounters& out = counters();
    for (int k = 0; k < kKinds; ++k) {
      out.sent[k] += in.sent[k] - sent[k];
      out.sent_bytes[k] += in.sent_bytes[k] - bytes[k];
    }
    out.calls += in.calls - calls;
    return s;
  }

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
};

}  // namespace zero

#endif  // ZERO_CORE_COMM_FORWARDING_COMMUNICATOR_H_
