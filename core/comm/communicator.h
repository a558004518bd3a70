// The collective interface every backend (thread, mpi, nccl) implements.
// Calls are blocking and bounded by the communicator's timeout: a peer that
// never arrives yields DeadlineExceeded, after which the communicator is
// broken and every later call fails with Aborted. Asynchrony (overlap with
// compute) comes from CommStream, which runs these calls on its own thread.
#ifndef ZERO_CORE_COMM_COMMUNICATOR_H_
#define ZERO_CORE_COMM_COMMUNICATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/common/dtype.h"

namespace zero {

enum class ReduceOp { kSum, kMax };

// Kinds of traffic the counters tell apart. kControl is scalar bookkeeping
// (norms, overflow flags, agreement checks) kept out of the model-state
// traffic that the ZeRO formulas describe.
enum class CollectiveKind {
  kAllGather = 0,
  kReduceScatter = 1,
  kAllReduce = 2,
  kBroadcast = 3,
  kControl = 4,
  kCount = 5
};

// Elements this rank sent, counted as the ZeRO paper does.
struct CommCounters {
  std::atomic<int64_t> sent[static_cast<int>(CollectiveKind::kCount)] = {};
  std::atomic<int64_t> sent_bytes[static_cast<int>(CollectiveKind::kCount)] = {};
  std::atomic<int64_t> calls{0};
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend_name() const = 0;
  // A device communicator (nccl) moves device memory only; host ones (mpi,
  // thread) host memory only. device_ordinal() names its GPU, or -1.
  virtual bool device_memory() const { return false; }
  virtual int device_ordinal() const { return -1; }
  // A device communicator: each later collective first waits for the work
  // already enqueued on `stream` (the compute stream of the device whose
  // memory it moves, Device::stream_handle()), so it never reads a buffer
  // before the kernels that fill it ran, nor writes one a queued fill would
  // overwrite. Duplicates keep it. Host communicators ignore it.
  virtual void set_wait_stream(void* stream) { (void)stream; }

  // Gathers variable-size pieces: rank r contributes counts[r] elements of
  // `dtype` from `send`; `recv` receives all pieces back to back in rank
  // order. `send` may alias recv + offset of this rank's piece (in place).
  virtual absl::Status AllGatherV(const void* send, void* recv,
                                  const std::vector<int64_t>& counts,
                                  DType dtype) = 0;

  // Sums `send` (sum(counts) elements laid out as rank 0's piece, rank 1's
  // piece, ...) over ranks; rank r receives its reduced piece (counts[r]
  // elements) in `recv`. Only fp32 is reduced (gradients reduce in fp32).
  virtual absl::Status ReduceScatterV(const float* send, float* recv,
                                      const std::vector<int64_t>& counts) = 0;

  // Gradient reductions in half precision (communication_data_type fp16 /
  // bf16): buffers hold `dtype` elements (kF16 or kBF16), half the bytes of
  // the fp32 calls. The thread backend sums each element in fp32 in rank
  // order and rounds once; MPI (a user op) and NCCL (ncclHalf /
  // ncclBfloat16) combine partial sums in their own order, rounding each to
  // `dtype`, as DeepSpeed's fp16 reductions over NCCL do. Backends without
  // it return Unimplemented naming themselves.
  virtual absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                          const std::vector<int64_t>& counts, DType dtype) {
    (void)send, (void)recv, (void)counts, (void)dtype;
    return absl::UnimplementedError(absl::StrCat(
        "communication_data_type fp16/bf16: the ", backend_name(),
        " communicator has no half-precision reduce-scatter"));
  }
  virtual absl::Status AllReduceHalf(void* data, int64_t count, DType dtype) {
    (void)data, (void)count, (void)dtype;
    return absl::UnimplementedError(absl::StrCat(
        "communication_data_type fp16/bf16: the ", backend_name(),
        " communicator has no half-precision all-reduce"));
  }

  virtual absl::Status AllReduce(float* data, int64_t count, ReduceOp op) = 0;
  virtual absl::Status AllReduce(double* data, int64_t count, ReduceOp op) = 0;

  virtual absl::Status Broadcast(void* data, int64_t bytes, int root) = 0;
  virtual absl::Status Barrier() = 0;

  // NOT collective: this rank gives up (an exception escaped the training
  // step). Every peer fails promptly with "rank N failed: <reason>" instead
  // of waiting out the timeout: the thread backend breaks the group and its
  // duplicates; MPI and NCCL abort the job (MPI_Abort: mpirun ends every
  // rank), which does not return.
  virtual void Abort(const std::string& reason) = 0;

  // COLLECTIVE. A new communicator over the same ranks whose traffic never
  // mixes with this one's (an engine's own channel, like MPI_Comm_dup).
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() = 0;

  // COLLECTIVE. A communicator over the ranks that passed the same `color`,
  // ranked by (key, rank), like MPI_Comm_split: the node and cross-node
  // groups of core/comm/topology.h. Backends that cannot split say so.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) {
    (void)color;
    (void)key;
    return absl::UnimplementedError(absl::StrCat(
        backend_name(), " communicator: cannot split into sub-communicators (hierarchical "
        "modes need the thread, mpi or nccl communicator)"));
  }

  // COLLECTIVE. Personalized exchange: this rank sends send_counts[r]
  // elements of `dtype` (back to back in rank order in `send`) to rank r
  // and receives recv_counts[r] from rank r (back to back in `recv`).
  // Counted as reduce-scatter traffic (it carries qgZ's partial sums).
  virtual absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                                 void* recv, const std::vector<int64_t>& recv_counts,
                                 DType dtype) {
    (void)send, (void)send_counts, (void)recv, (void)recv_counts, (void)dtype;
    return absl::UnimplementedError(absl::StrCat(
        backend_name(), " communicator: no all-to-all (zero_quantized_gradients needs the "
        "thread, mpi or nccl communicator)"));
  }

  void set_timeout_seconds(double s) { timeout_seconds_ = s; }
  double timeout_seconds() const { return timeout_seconds_; }

  // Traffic accounting. `kind` lets the caller file a collective under
  // kControl; the default files it under its own kind.
  CommCounters& counters() { return counters_; }
  const CommCounters& counters() const { return counters_; }

  // Every collective a Communicator method makes counts under the kind set
  // here for its duration (see ScopedKind); kCount means "its own kind".
  void set_counting_kind(CollectiveKind k) { counting_kind_ = k; }
  CollectiveKind counting_kind() const { return counting_kind_; }

 protected:
  void Count(CollectiveKind own_kind, int64_t elems, size_t elem_bytes) {
    CollectiveKind k =
        counting_kind_ == CollectiveKind::kCount ? own_kind : counting_kind_;
    counters_.sent[static_cast<int>(k)] += elems;
    counters_.sent_bytes[static_cast<int>(k)] += elems * static_cast<int64_t>(elem_bytes);
    counters_.calls += 1;
  }

  double timeout_seconds_ = 300.0;

 private:
  CommCounters counters_;
  CollectiveKind counting_kind_ = CollectiveKind::kCount;
};

// Files every collective made in this scope under `kind` (e.g. kControl).
class ScopedCountingKind {
 public:
  ScopedCountingKind(Communicator* c, CollectiveKind kind)
      : c_(c), prev_(c->counting_kind()) {
    c_->set_counting_kind(kind);
  }
  ~ScopedCountingKind() { c_->set_counting_kind(prev_); }

 private:
  Communicator* c_;
  CollectiveKind prev_;
};

// Elements sent, ZeRO paper accounting, shared by all backends so counters
// agree across them.
inline int64_t AllGatherSent(const std::vector<int64_t>& counts, int rank) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total - counts[rank];
}
inline int64_t AllReduceSent(int64_t count, int world) {
  return world <= 1 ? 0 : 2 * count * (world - 1) / world;
}

}  // namespace zero

#endif  // ZERO_CORE_COMM_COMMUNICATOR_H_
