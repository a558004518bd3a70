#include "core/backend/standin_comm.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/forwarding_communicator.h"
#include "core/device/guarded_device.h"

namespace zero {
namespace {

// Each collective reaches its buffers through the device-side aliases and
// waits for the compute stream first; ForwardingCommunicator runs it on the
// host communicator underneath, files its traffic here, and wraps
// duplicates and splits (keeping the wait stream, as NcclCommunicator does).
class StandinDeviceComm : public ForwardingCommunicator {
 public:
  explicit StandinDeviceComm(std::unique_ptr<Communicator> inner)
      : ForwardingCommunicator(std::move(inner)) {}

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
    return Forward([&] { return inner()->AllGatherV(s, r, counts, dtype); });
  }
  absl::Status ReduceScatterV(const float* send, float* recv,
                              const std::vector<int64_t>& counts) override {
    Before();
    auto* s = static_cast<const float*>(Dev(send, "reduce_scatter"));
    auto* r = counts[rank()] > 0 ? static_cast<float*>(Dev(recv, "reduce_scatter"))
                                 : const_cast<float*>(s);
    if (r == nullptr || s == nullptr) return HostMemory("reduce_scatter");
    return Forward([&] { return inner()->ReduceScatterV(s, r, counts); });
  }
  absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                  const std::vector<int64_t>& counts, DType dtype) override {
    Before();
    const void* s = Dev(send, "reduce_scatter");
    void* r = counts[rank()] > 0 ? Dev(recv, "reduce_scatter") : const_cast<void*>(s);
    if (r == nullptr || s == nullptr) return HostMemory("reduce_scatter");
    return Forward([&] { return inner()->ReduceScatterVHalf(s, r, counts, dtype); });
  }
  absl::Status AllReduceHalf(void* data, int64_t n, DType dtype) override {
    Before();
    void* d = Dev(data, "all_reduce");
    if (d == nullptr && n > 0) return HostMemory("all_reduce");
    return Forward([&] { return inner()->AllReduceHalf(d, n, dtype); });
  }
  absl::Status AllReduce(float* data, int64_t n, ReduceOp op) override {
    Before();
    auto* d = static_cast<float*>(Dev(data, "all_reduce"));
    if (d == nullptr && n > 0) return HostMemory("all_reduce");
    return Forward([&] { return inner()->AllReduce(d, n, op); });
  }
  absl::Status AllReduce(double* data, int64_t n, ReduceOp op) override {
    Before();
    auto* d = static_cast<double*>(Dev(data, "all_reduce"));
    if (d == nullptr && n > 0) return HostMemory("all_reduce");
    return Forward([&] { return inner()->AllReduce(d, n, op); });
  }
  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    Before();
    void* d = Dev(data, "broadcast");
    if (d == nullptr && bytes > 0) return HostMemory("broadcast");
    return Forward([&] { return inner()->Broadcast(d, bytes, root); });
  }
  absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
    Before();
    int64_t ns = 0, nr = 0;
    for (int64_t c : send_counts) ns += c;
    for (int64_t c : recv_counts) nr += c;
    const void* s = ns > 0 ? Dev(send, "all_to_all") : nullptr;
    void* r = nr > 0 ? Dev(recv, "all_to_all") : nullptr;
    if ((ns > 0 && s == nullptr) || (nr > 0 && r == nullptr)) return HostMemory("all_to_all");
    return Forward([&] { return inner()->AllToAllV(s, send_counts, r, recv_counts, dtype); });
  }

 protected:
  absl::StatusOr<std::unique_ptr<Communicator>> Rewrap(
      std::unique_ptr<Communicator> inner) override {
    auto c = std::make_unique<StandinDeviceComm>(std::move(inner));
    c->wait_ = wait_;  // as NcclCommunicator::Duplicate / Split keep their wait stream
    c->set_timeout_seconds(timeout_seconds_);
    return std::unique_ptr<Communicator>(std::move(c));
  }

 private:
  // The collective "stream" starts after the compute stream's queued work
  // only when it was told to wait for it.
  void Before() {
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
  void* wait_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> MakeStandinDeviceComm(std::unique_ptr<Communicator> inner) {
  return std::make_unique<StandinDeviceComm>(std::move(inner));
}

}  // namespace zero
