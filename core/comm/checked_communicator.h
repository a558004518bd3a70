// Every collective checked before its data moves (docs/ARCHITECTURE.md,
// "When ranks disagree"): a wrapper that first all-gathers a fixed-size
// signature of the collective (core/comm/collective_signature.h) over the
// communicator it wraps, and on any difference fails on every rank with
// the same message naming each rank's side (ZERO_MISMATCH), instead of
// letting ranks pair collectives of other sizes (MPI_ERR_TRUNCATE, heap
// corruption) or other meanings (silently wrong sums). The signature
// exchange always pairs up, whatever the ranks do next, because it is the
// same size on every rank. After a divergence, or a timeout, every later
// collective of the family (duplicates and splits share one monitor) fails
// with Aborted; each rank prints its flight recorder once.
#ifndef ZERO_CORE_COMM_CHECKED_COMMUNICATOR_H_
#define ZERO_CORE_COMM_CHECKED_COMMUNICATOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/collective_signature.h"
#include "core/comm/flight_recorder.h"
#include "core/comm/forwarding_communicator.h"

namespace zero {

// What the communicators of one engine share: the flight recorder, the
// first failure, how to name params.
class DivergenceMonitor {
 public:
  // `recorder_capacity`: collectives kept (zero_flight_recorder_size).
  DivergenceMonitor(int rank, int recorder_capacity) : recorder_(rank, recorder_capacity) {}

  FlightRecorder& recorder() { return recorder_; }
  // Set once the params are registered (the engine's finalize).
  void set_param_namer(ParamNamer n);
  ParamNamer namer() const;
  // A device communicator (NCCL) moves device memory only: the signature
  // is exchanged through a host-memory view of it that this makes (the
  // engine sets it once it has a device; until then a device communicator's
  // collectives go unchecked).
  using HostView = std::function<std::unique_ptr<Communicator>(Communicator* inner)>;
  void set_host_view(HostView f);
  // The view of device communicator `inner`, made once and kept here (null
  // while no factory is set). DropHostViews frees them while the device
  // that staged them still exists (the engine's destructor).
  Communicator* HostViewOf(Communicator* inner);
  void DropHostViews();

  // The divergence or timeout that broke the family; OK while none did.
  absl::Status failure() const;
  // Records `s` as the family's failure (the first one only) and, the first
  // time, prints this rank's flight recorder (and on rank 0 the divergence).
  void Fail(const absl::Status& s, int rank, bool diverged);
  // Lines of the flight recorder printed on a failure.
  static constexpr int kPrintedLines = 32;

  int NextCommId() { return next_comm_id_++; }

 private:
  FlightRecorder recorder_;
  mutable std::mutex mu_;
  ParamNamer namer_;
  HostView host_view_;
  std::vector<std::pair<Communicator*, std::unique_ptr<Communicator>>> host_views_;
  absl::Status failure_;
  std::atomic<int> next_comm_id_{1};
};

class CheckedCommunicator : public ForwardingCommunicator {
 public:
  // Owns `inner`; `comm_id` 0 is the engine's data communicator.
  CheckedCommunicator(std::unique_ptr<Communicator> inner,
                      std::shared_ptr<DivergenceMonitor> monitor, int comm_id);

  DivergenceMonitor* monitor() const { return monitor_.get(); }

  // COLLECTIVE. Only the signature exchange, no data: the ranks check that
  // they enter the same engine call at the same step and micro-step before
  // any rank-local precondition check can make some of them skip its
  // collectives (a save mid-accumulation on one rank).
  absl::Status AgreeOnCall();

  absl::Status AllGatherV(const void* send, void* recv, const std::vector<int64_t>& counts,
                          DType dtype) override;
  absl::Status ReduceScatterV(const float* send, float* recv,
                              const std::vector<int64_t>& counts) override;
  absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                  const std::vector<int64_t>& counts, DType dtype) override;
  absl::Status AllReduceHalf(void* data, int64_t count, DType dtype) override;
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override;
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override;
  absl::Status Broadcast(void* data, int64_t bytes, int root) override;
  absl::Status Barrier() override;
  absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override;

 protected:
  absl::StatusOr<std::unique_ptr<Communicator>> Rewrap(
      std::unique_ptr<Communicator> inner) override;

 private:
  // Exchanges `sig` (completed here with the sequence number and the call
  // site), compares, then runs `data` unless the ranks disagree.
  absl::Status Checked(CollectiveSignature sig, const std::function<absl::Status()>& data);
  absl::Status Exchange(const CollectiveSignature& mine, std::vector<CollectiveSignature>* all);
  std::string name() const;

  std::shared_ptr<DivergenceMonitor> monitor_;
  const int comm_id_;
  int64_t seq_ = 0;
};

// Ranks whose deferrable gradient reductions differ (CallSite::deferrable):
// no data moved, the communicator stays usable, and every rank got it.
absl::Status BucketDivergenceError(const std::string& message);
bool IsBucketDivergence(const absl::Status& s);

// `inner` wrapped so each collective is checked; its duplicates and splits
// are checked too, all sharing `monitor`.
std::unique_ptr<CheckedCommunicator> MakeCheckedCommunicator(
    std::unique_ptr<Communicator> inner, std::shared_ptr<DivergenceMonitor> monitor);

}  // namespace zero

#endif  // ZERO_CORE_COMM_CHECKED_COMMUNICATOR_H_
