#include "core/backend/standin_comm.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device/guarded_device.h"

namespace zero {
namespace {

class StandinDeviceComm : public Communicator {
 public:
  explicit StandinDeviceComm(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {
    timeout_seconds_ = inner_->timeout_seconds();
  }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend_name() const override { return "nccl-standin"; }
  bool device_memory() const override { return true; }
  int device_ordinal() const override { return 0; }
  void set_wait_stream(void* stream) override { wait_ = stream; }

  absl::Status AllGatherV(const void* send, void* recv, const std::vector<int64_t>& counts,
                          DType dtype) override {
    Before();
    void* r = Dev(recv, "all_gather");
    const void* s = counts[rank()] > 0 ? Dev(send, "all_gather") : r;
    if (r == nullptr || s == nullptr) return HostMemory("all_gather");
    return Run([&] { return inner_->AllGatherV(s, r, counts, dtype); });
  }
  absl::Status ReduceScatterV(const float* send, float* recv,
                              const std::vector<int64_t>& counts) override {
    Before();
    auto* s = static_cast<const float*>(Dev(send, "reduce_scatter"));
    auto* r = counts[rank()] > 0 ? static_cast<float*>(Dev(recv, "reduce_scatter"))
                                 : const_cast<float*>(s);
    if (r == nullptr || s == nullptr) return HostMemory("reduce_scatter");
    return Run([&] { return inner_->ReduceScatterV(s, r, counts); });
  }
  absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                  const std::vector<int64_t>& counts, DType dtype) override {
    Before();
    const void* s = Dev(send, "reduce_scatter");
    void* r = counts[rank()] > 0 ? Dev(recv, "reduce_scatter") : const_cast<void*>(s);
    if (r == nullptr || s == nullptr) return HostMemory("reduce_scatter");
    return Run([&] { return inner_->ReduceScatterVHalf(s, r, counts, dtype); });
  }
  absl::Status AllReduceHalf(void* data, int64_t n, DType dtype) override {
    Before();
    void* d = Dev(data, "all_reduce");
    if (d == nullptr && n > 0) return HostMemory("all_reduce");
    return Run([&] { return inner_->AllReduceHalf(d, n, dtype); });
  }
  absl::Status AllReduce(float* data, int64_t n, ReduceOp op) override {
    Before();
    auto* d = static_cast<float*>(Dev(data, "all_reduce"));
    if (d == nullptr && n > 0) return HostMemory("all_reduce");
    return Run([&] { return inner_->AllReduce(d, n, op); });
  }
  absl::Status AllReduce(double* data, int64_t n, ReduceOp op) override {
    Before();
    auto* d = static_cast<double*>(Dev(data, "all_reduce"));
    if (d == nullptr && n > 0) return HostMemory("all_reduce");
    return Run([&] { return inner_->AllReduce(d, n, op); });
  }
  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    Before();
    void* d = Dev(data, "broadcast");
    if (d == nullptr && bytes > 0) return HostMemory("broadcast");
    return Run([&] { return inner_->Broadcast(d, bytes, root); });
  }
  absl::Status Barrier() override { return inner_->Barrier(); }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }
  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override {
    auto d = inner_->Duplicate();
    if (!d.ok()) return d.status();
    auto c = std::make_unique<StandinDeviceComm>(std::move(*d));
    c->wait_ = wait_;  // as NcclCommunicator::Duplicate keeps its wait stream
    c->set_timeout_seconds(timeout_seconds_);
    return std::unique_ptr<Communicator>(std::move(c));
  }

 private:
  // The collective "stream" starts after the compute stream's queued work
  // only when it was told to wait for it.
  void Before() {
    inner_->set_timeout_seconds(timeout_seconds_);
    if (GuardedStream* s = GuardedStream::FromHandle(wait_)) s->Flush();
  }
  static void* Dev(const void* p, const char*) {
    return p == nullptr ? nullptr : GuardedDevice::Alias(p);
  }
  absl::Status HostMemory(const char* what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl-standin communicator: ", what,
        ": a buffer is not stand-in device memory (NCCL needs device memory)"));
  }
  // Runs fn on the inner communicator, filing its traffic here.
  template <typename Fn>
  absl::Status Run(Fn fn) {
    CommCounters& in = inner_->counters();
    int64_t sent[static_cast<int>(CollectiveKind::kCount)], bytes[static_cast<int>(CollectiveKind::kCount)];
    for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
      sent[k] = in.sent[k];
      bytes[k] = in.sent_bytes[k];
    }
    const int64_t calls = in.calls;
    inner_->set_counting_kind(counting_kind());
    absl::Status s = fn();
    inner_->set_counting_kind(CollectiveKind::kCount);
    CommCounters& out = counters();
    for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
      out.sent[k] += in.sent[k] - sent[k];
      out.sent_bytes[k] += in.sent_bytes[k] - bytes[k];
    }
    out.calls += in.calls - calls;
    return s;
  }

  std::unique_ptr<Communicator> inner_;
  void* wait_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> MakeStandinDeviceComm(std::unique_ptr<Communicator> inner) {
  return std::make_unique<StandinDeviceComm>(std::move(inner));
}

}  // namespace zero
