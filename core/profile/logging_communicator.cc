#include "core/profile/logging_communicator.h"

#include <chrono>

#include "absl/strings/str_format.h"
#include "core/comm/forwarding_communicator.h"

namespace zero {
namespace {

// Times the collectives; ForwardingCommunicator forwards the rest (barrier,
// split, all-to-all: counted as the backend counts them, not logged).
class LoggingCommunicator : public ForwardingCommunicator {
 public:
  LoggingCommunicator(std::unique_ptr<Communicator> inner, CommLog* log, Recorder* recorder)
      : ForwardingCommunicator(std::move(inner)), log_(log), recorder_(recorder) {}

  absl::Status AllGatherV(const void* send, void* recv, const std::vector<int64_t>& counts,
                          DType dtype) override {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    const size_t es = DTypeSize(dtype);
    return Run(CollectiveOp::kAllGather, CollectiveKind::kAllGather, total * es,
               AllGatherSent(counts, rank()), es,
               [&] { return inner()->AllGatherV(send, recv, counts, dtype); });
  }

  absl::Status ReduceScatterV(const float* send, float* recv,
                              const std::vector<int64_t>& counts) override {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    return Run(CollectiveOp::kReduceScatter, CollectiveKind::kReduceScatter,
               total * sizeof(float), AllGatherSent(counts, rank()), sizeof(float),
               [&] { return inner()->ReduceScatterV(send, recv, counts); });
  }

  // communication_data_type fp16/bf16: 2-byte elements.
  absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                  const std::vector<int64_t>& counts, DType dtype) override {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    return Run(CollectiveOp::kReduceScatter, CollectiveKind::kReduceScatter, total * 2,
               AllGatherSent(counts, rank()), 2,
               [&] { return inner()->ReduceScatterVHalf(send, recv, counts, dtype); });
  }
  absl::Status AllReduceHalf(void* data, int64_t count, DType dtype) override {
    return Run(CollectiveOp::kAllReduce, CollectiveKind::kAllReduce, count * 2,
               AllReduceSent(count, world_size()), 2,
               [&] { return inner()->AllReduceHalf(data, count, dtype); });
  }

  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    return Run(CollectiveOp::kAllReduce, CollectiveKind::kAllReduce, count * sizeof(float),
               AllReduceSent(count, world_size()), sizeof(float),
               [&] { return inner()->AllReduce(data, count, op); });
  }
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override {
    return Run(CollectiveOp::kAllReduce, CollectiveKind::kAllReduce, count * sizeof(double),
               AllReduceSent(count, world_size()), sizeof(double),
               [&] { return inner()->AllReduce(data, count, op); });
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    return Run(CollectiveOp::kBroadcast, CollectiveKind::kBroadcast, bytes,
               rank() == root ? bytes : 0, 1,
               [&] { return inner()->Broadcast(data, bytes, root); });
  }

 protected:
  absl::StatusOr<std::unique_ptr<Communicator>> Rewrap(
      std::unique_ptr<Communicator> inner) override {
    return MakeLoggingCommunicator(std::move(inner), log_, recorder_);
  }

 private:
  template <typename F>
  absl::Status Run(CollectiveOp op, CollectiveKind own, int64_t msg_bytes, int64_t sent_elems,
                   size_t elem_bytes, F call) {
    inner()->set_timeout_seconds(timeout_seconds_);
    const CollectiveKind kind = counting_kind() == CollectiveKind::kCount ? own : counting_kind();
    const auto t0 = Recorder::Clock::now();
    absl::Status s = call();
    const auto t1 = Recorder::Clock::now();
    if (!s.ok()) return s;
    Count(own, sent_elems, elem_bytes);
    if (log_ && log_->Wanted(op)) {
      log_->Record(op, kind, msg_bytes, sent_elems * static_cast<int64_t>(elem_bytes),
                   std::chrono::duration<double>(t1 - t0).count());
    }
    if (recorder_ && recorder_->tracing()) {
      recorder_->Add(Phase::kCollective, t0, t1, CollectiveOpName(op),
                     absl::StrFormat("%d bytes%s", msg_bytes,
                                     kind == CollectiveKind::kControl ? ", control" : ""));
    }
    return s;
  }

  CommLog* log_;
  Recorder* recorder_;
};

}  // namespace

std::unique_ptr<Communicator> MakeLoggingCommunicator(std::unique_ptr<Communicator> inner,
                                                      CommLog* log, Recorder* recorder) {
  return std::make_unique<LoggingCommunicator>(std::move(inner), log, recorder);
}

}  // namespace zero
