#include "core/comm/checked_communicator.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/common/errors.h"

namespace zero {
namespace {

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t t = 0;
  for (int64_t x : v) t += x;
  return t;
}

int64_t Hash(const std::vector<int64_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t x : v) {
    h ^= static_cast<uint64_t>(x);
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h);
}

CollectiveSignature Sig(SignedOp op, int64_t elems, int64_t counts_hash, int64_t dtype,
                        int64_t root) {
  CollectiveSignature s;
  s.op = static_cast<int64_t>(op);
  s.elems = elems;
  s.counts_hash = counts_hash;
  s.dtype = dtype;
  s.root = root;
  return s;
}

constexpr int64_t kSigFloats = sizeof(CollectiveSignature) / sizeof(float);
constexpr char kBucketDivergenceUrl[] = "zero.dev/bucket-divergence";

}  // namespace

absl::Status BucketDivergenceError(const std::string& message) {
  absl::Status s(absl::StatusCode::kFailedPrecondition, message);
  s.SetPayload(kBucketDivergenceUrl, absl::Cord("1"));
  return s;
}

bool IsBucketDivergence(const absl::Status& s) {
  return !s.ok() && s.GetPayload(kBucketDivergenceUrl).has_value();
}

void DivergenceMonitor::set_param_namer(ParamNamer n) {
  std::lock_guard<std::mutex> l(mu_);
  namer_ = std::move(n);
}

ParamNamer DivergenceMonitor::namer() const {
  std::lock_guard<std::mutex> l(mu_);
  return namer_;
}

void DivergenceMonitor::set_host_view(HostView f) {
  std::lock_guard<std::mutex> l(mu_);
  host_view_ = std::move(f);
}

Communicator* DivergenceMonitor::HostViewOf(Communicator* inner) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [c, view] : host_views_) {
    if (c == inner) return view.get();
  }
  if (!host_view_) return nullptr;
  host_views_.emplace_back(inner, host_view_(inner));
  return host_views_.back().second.get();
}

void DivergenceMonitor::DropHostViews() {
  std::lock_guard<std::mutex> l(mu_);
  host_views_.clear();
  host_view_ = nullptr;
}

absl::Status DivergenceMonitor::failure() const {
  std::lock_guard<std::mutex> l(mu_);
  return failure_;
}

void DivergenceMonitor::Fail(const absl::Status& s, int rank, bool diverged) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!failure_.ok()) return;
    failure_ = s;
  }
  // Every rank prints its own record; the divergence message (the first
  // point where the ranks' records differ: every earlier collective agreed)
  // is the same on every rank, so rank 0 prints it once.
  std::string out = recorder_.Text(namer(), kPrintedLines);
  if (diverged && rank == 0) {
    absl::StrAppend(&out, "[zero] first divergence: ", s.message(), "\n");
  }
  std::fprintf(stderr, "%s", out.c_str());
  std::fflush(stderr);
}

CheckedCommunicator::CheckedCommunicator(std::unique_ptr<Communicator> inner,
                                         std::shared_ptr<DivergenceMonitor> monitor,
                                         int comm_id)
    : ForwardingCommunicator(std::move(inner)), monitor_(std::move(monitor)),
      comm_id_(comm_id) {}

std::string CheckedCommunicator::name() const {
  return comm_id_ == 0 ? "data" : absl::StrCat("sub-group ", comm_id_);
}

absl::StatusOr<std::unique_ptr<Communicator>> CheckedCommunicator::Rewrap(
    std::unique_ptr<Communicator> inner) {
  auto c = std::make_unique<CheckedCommunicator>(std::move(inner), monitor_,
                                                 monitor_->NextCommId());
  c->set_timeout_seconds(timeout_seconds_);
  return std::unique_ptr<Communicator>(std::move(c));
}

absl::Status CheckedCommunicator::Exchange(const CollectiveSignature& mine,
                                           std::vector<CollectiveSignature>* all) {
  Communicator* x = inner();
  if (x->device_memory()) {
    x = monitor_->HostViewOf(x);
    if (x == nullptr) {  // no device yet: nothing to stage through
      all->assign(world_size(), mine);
      return absl::OkStatus();
    }
  }
  x->set_timeout_seconds(timeout_seconds_);
  return x->AllGatherV(&mine, all->data(), std::vector<int64_t>(world_size(), kSigFloats),
                       DType::kF32);
}

absl::Status CheckedCommunicator::Checked(CollectiveSignature sig,
                                          const std::function<absl::Status()>& data) {
  if (absl::Status f = monitor_->failure(); !f.ok()) {
    return absl::AbortedError(
        absl::StrCat("communicator unusable after an earlier failure: ", f.message()));
  }
  sig.seq = ++seq_;
  sig.comm = comm_id_;
  StampCallSite(&sig);
  FlightRecorder& rec = monitor_->recorder();
  const int64_t index = rec.Start(sig);
  auto failed = [&](const absl::Status& s, bool diverged) {
    const bool timeout = s.code() == absl::StatusCode::kDeadlineExceeded;
    rec.Finish(index, diverged  ? CollectiveOutcome::kDiverged
                      : timeout ? CollectiveOutcome::kTimedOut
                                : CollectiveOutcome::kFailed);
    // A timeout, a broken peer or a divergence leaves the ranks out of
    // step: the family is done. Refusals (unimplemented, a bad argument)
    // happen alike on every rank before any data moved.
    if (diverged || timeout || s.code() == absl::StatusCode::kAborted ||
        s.code() == absl::StatusCode::kInternal) {
      monitor_->Fail(s, rank(), diverged);
    }
    return s;
  };
  if (world_size() > 1) {
    std::vector<CollectiveSignature> all(world_size());
    absl::Status s = Exchange(sig, &all);
    if (!s.ok()) {
      // The backend's message first (what failed, on which rank), then
      // what this rank was about to do.
      return failed(absl::Status(s.code(), absl::StrCat(s.message(), " (checking collective ",
                                                        sig.seq, ": this rank ",
                                                        DescribeCollective(
                                                            sig, monitor_->namer()),
                                                        ")")),
                    false);
    }
    for (const CollectiveSignature& other : all) {
      if (SignaturesAgree(other, sig)) continue;
      if (DeferrableDivergence(all)) {  // the reducer puts them off; no data moved
        rec.Finish(index, CollectiveOutcome::kDeferred);
        return BucketDivergenceError(DivergenceMessage(all, name(), monitor_->namer()));
      }
      return failed(MismatchError(DivergenceMessage(all, name(), monitor_->namer())), true);
    }
  }
  absl::Status s = data();
  if (!s.ok()) {
    return failed(absl::Status(s.code(), absl::StrCat(s.message(), " (collective ", sig.seq,
                                                      ": this rank ",
                                                      DescribeCollective(
                                                          sig, monitor_->namer()),
                                                      ")")),
                  false);
  }
  rec.Finish(index, CollectiveOutcome::kDone);
  return s;
}

absl::Status CheckedCommunicator::AllGatherV(const void* send, void* recv,
                                             const std::vector<int64_t>& counts, DType dtype) {
  return Checked(Sig(SignedOp::kAllGather, Sum(counts), Hash(counts),
                     static_cast<int64_t>(dtype), -1),
                 [&] { return ForwardingCommunicator::AllGatherV(send, recv, counts, dtype); });
}

absl::Status CheckedCommunicator::ReduceScatterV(const float* send, float* recv,
                                                 const std::vector<int64_t>& counts) {
  return Checked(Sig(SignedOp::kReduceScatter, Sum(counts), Hash(counts),
                     static_cast<int64_t>(DType::kF32), -1),
                 [&] { return ForwardingCommunicator::ReduceScatterV(send, recv, counts); });
}

absl::Status CheckedCommunicator::ReduceScatterVHalf(const void* send, void* recv,
                                                     const std::vector<int64_t>& counts,
                                                     DType dtype) {
  return Checked(Sig(SignedOp::kReduceScatterHalf, Sum(counts), Hash(counts),
                     static_cast<int64_t>(dtype), -1),
                 [&] {
                   return ForwardingCommunicator::ReduceScatterVHalf(send, recv, counts, dtype);
                 });
}

absl::Status CheckedCommunicator::AllReduceHalf(void* data, int64_t count, DType dtype) {
  return Checked(Sig(SignedOp::kAllReduceHalf, count, 0, static_cast<int64_t>(dtype), -1),
                 [&] { return ForwardingCommunicator::AllReduceHalf(data, count, dtype); });
}

absl::Status CheckedCommunicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  return Checked(Sig(SignedOp::kAllReduceF32, count, 0, -1, static_cast<int64_t>(op)),
                 [&] { return ForwardingCommunicator::AllReduce(data, count, op); });
}

absl::Status CheckedCommunicator::AllReduce(double* data, int64_t count, ReduceOp op) {
  return Checked(Sig(SignedOp::kAllReduceF64, count, 0, -1, static_cast<int64_t>(op)),
                 [&] { return ForwardingCommunicator::AllReduce(data, count, op); });
}

absl::Status CheckedCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  return Checked(Sig(SignedOp::kBroadcast, bytes, 0, -1, root),
                 [&] { return ForwardingCommunicator::Broadcast(data, bytes, root); });
}

absl::Status CheckedCommunicator::AgreeOnCall() {
  return Checked(Sig(SignedOp::kCallEntry, 0, 0, -1, -1), [] { return absl::OkStatus(); });
}

absl::Status CheckedCommunicator::Barrier() {
  return Checked(Sig(SignedOp::kBarrier, 0, 0, -1, -1),
                 [&] { return ForwardingCommunicator::Barrier(); });
}

absl::Status CheckedCommunicator::AllToAllV(const void* send,
                                            const std::vector<int64_t>& send_counts, void* recv,
                                            const std::vector<int64_t>& recv_counts,
                                            DType dtype) {
  return Checked(Sig(SignedOp::kAllToAll, Sum(send_counts), 0, static_cast<int64_t>(dtype),
                     -1),
                 [&] {
                   return ForwardingCommunicator::AllToAllV(send, send_counts, recv, recv_counts,
                                                            dtype);
                 });
}

std::unique_ptr<CheckedCommunicator> MakeCheckedCommunicator(
    std::unique_ptr<Communicator> inner, std::shared_ptr<DivergenceMonitor> monitor) {
  auto c = std::make_unique<CheckedCommunicator>(std::move(inner), std::move(monitor), 0);
  return c;
}

}  // namespace zero
