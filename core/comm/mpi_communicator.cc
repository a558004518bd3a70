#include "core/comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/mpi_arrival_gate.h"
#include "core/comm/mpi_blocking_worker.h"
#include "core/comm/mpi_core_count.h"
#include "core/comm/mpi_init_policy.h"
#include "core/comm/mpi_local_doorbell.h"
#include "core/comm/mpi_short_sleep.h"
#include "core/comm/mpi_sum_algorithms.h"
#include "core/comm/mpi_watchdog.h"

// The MPI communicator: each collective in one of two run modes (default:
// blocking ones on the worker thread, the rest polled on the caller; direct:
// the blocking call on the caller, the watchdog keeping the deadline). Its
// parts live in files named for them: mpi_init_policy, mpi_core_count,
// mpi_blocking_worker, mpi_watchdog, mpi_sum_algorithms, mpi_arrival_gate.
namespace zero {
namespace {

using Clock = std::chrono::steady_clock;

std::string MpiError(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    oversubscribed_ = ThreadsOutnumberCores();
    ranks_outnumber_cores_ = RanksOutnumberCores();
    // The arrival gate (mpi_arrival_gate.h), in default mode while each
    // rank has a core: with more ranks than cores a barrier among ranks
    // that sleep between tests waits for the slowest sleeper each round
    // (the C engine's stage-3 step took 1.7-2.7x as long at 4 ranks on 2
    // cores, bench/README.md), and OpenMPI yields in its waits there anyway.
    gate_ = !DirectModeFromEnv() && !ranks_outnumber_cores_;
    // Whenever the ranks' threads outnumber the cores, a peer that is late
    // inside a transfer has lost its core (to our own threads or to other
    // work on the node): once a wait outlasts the transfer the calling
    // thread's polls sleep between tests, up to 80 us
    // (ArrivalGateOptions::transfer_max_sleep; Wait's too, after 1 ms), so
    // the core goes to that peer instead of to back-to-back tests
    // (bench/README.md, "Waiting under load").
    if (oversubscribed_) {
      wait_options_.transfer_max_sleep = std::chrono::microseconds(80);
    }
    // Those sleeps on the node's doorbell (local_doorbell.h), where there
    // is one (ZERO_MPI_DOORBELL): a peer that posts or moves a collective
    // rings, so the wait ends then instead of at its timer's guess. Made
    // on every rank alike (a collective), direct mode included, which
    // never sleeps and so never uses it.
    doorbell_ = std::shared_ptr<LocalDoorbell>(MakeMpiLocalDoorbell(comm_));
    wait_options_.doorbell = doorbell_.get();
    if (DirectModeFromEnv()) {
      slot_ = std::make_shared<WatchSlot>();
      slot_->rank = rank_;
      slot_->world = world_;
      Watchdog::Get().Add(slot_);
    }
  }
  ~MpiCommunicator() override {
    if (worker_) worker_->Stop();  // a stuck one never reads it; it is detached
    // A request left pending by a timeout may still read the all-gather-v
    // counts the worker holds: keep them (a broken job ends soon).
    if (broken_ && worker_) new std::shared_ptr<BlockingWorker>(worker_);
    // So may the worker's gate sleep on the doorbell.
    if (broken_ && doorbell_) new std::shared_ptr<LocalDoorbell>(doorbell_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !broken_) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend_name() const override { return "mpi"; }

  absl::Status AllGatherV(const void* send, void* recv,
                          const std::vector<int64_t>& counts,
                          DType dtype) override {
    if (broken_) return Broken("all-gather");
    // The counts go to the worker object's own vectors (used by one call at
    // a time; kept alive past a timed-out one, see ~MpiCommunicator).
    Worker();
    std::vector<int>& c = worker_->counts;
    std::vector<int>& d = worker_->displs;
    if (auto s = Displacements(counts, &c, &d); !s.ok()) return s;
    MpiJob j{MpiJob::kAllGather};
    j.type = dtype == DType::kF32 ? MPI_FLOAT : MPI_UINT16_T;
    const size_t es = DTypeSize(dtype);
    j.send = send;
    // In place when the caller's piece already sits in recv.
    if (static_cast<const char*>(send) ==
        static_cast<char*>(recv) + static_cast<size_t>(d[rank_]) * es) {
      j.send = MPI_IN_PLACE;
    }
    j.recv = recv;
    j.count = c[rank_];
    // Equal pieces (every shard-sized gather) take the regular collective,
    // whose algorithms are faster than the v-variant's.
    if (!Equal(c)) j.op = MpiJob::kAllGatherV;
    if (auto s = Blocking("all-gather", j); !s.ok()) return s;
    Count(CollectiveKind::kAllGather, AllGatherSent(counts, rank_), DTypeSize(dtype));
    return absl::OkStatus();
  }

  absl::Status ReduceScatterV(const float* send, float* recv,
                              const std::vector<int64_t>& counts) override {
    std::vector<int> c, d;
    if (auto s = Displacements(counts, &c, &d); !s.ok()) return s;
    // Not the blocking (tuned) algorithms: they sum in another order at 3+
    // ranks, which would change every fp32 result recorded so far. At 2
    // ranks each element is one addition, the same bits in either order:
    // direct mode takes the blocking call there.
    if (DirectPair(c)) {
      return DirectReduceScatter(send, recv, counts, MPI_FLOAT, MPI_SUM, sizeof(float));
    }
    if (world_ >= 2) return ExchangeReduceScatter(send, recv, counts, c, d);
    GatedRequests g;
    if (auto s = PostGate("reduce-scatter", &g); !s.ok()) return s;
    int rc = Equal(c) ? MPI_Ireduce_scatter_block(send, recv, c[0], MPI_FLOAT,
                                                  MPI_SUM, comm_, &g.req)
                      : MPI_Ireduce_scatter(send, recv, c.data(), MPI_FLOAT,
                                            MPI_SUM, comm_, &g.req);
    if (auto s = AwaitGated("reduce-scatter", rc, &g, 1, &g.req, 0); !s.ok()) return s;
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank_), sizeof(float));
    return absl::OkStatus();
  }

  absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                  const std::vector<int64_t>& counts, DType dtype) override {
    std::vector<int> c, d;
    if (auto s = Displacements(counts, &c, &d); !s.ok()) return s;
    const MPI_Op op = HalfSum(dtype);
    if (DirectPair(c)) {  // as ReduceScatterV: one fp32 sum per element
      return DirectReduceScatter(send, recv, counts, MPI_UINT16_T, op, 2);
    }
    GatedRequests g;
    if (auto s = PostGate("reduce-scatter", &g); !s.ok()) return s;
    int rc = Equal(c) ? MPI_Ireduce_scatter_block(send, recv, c[0], MPI_UINT16_T, op, comm_, &g.req)
                      : MPI_Ireduce_scatter(send, recv, c.data(), MPI_UINT16_T, op, comm_, &g.req);
    if (auto s = AwaitGated("reduce-scatter", rc, &g, 1, &g.req, AllGatherSent(counts, rank_) * 2);
        !s.ok()) {
      return s;
    }
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank_), 2);
    return absl::OkStatus();
  }

  absl::Status AllReduceHalf(void* data, int64_t count, DType dtype) override {
    if (count > INT_MAX) return absl::InvalidArgumentError("AllReduce: too large");
    GatedRequests g;
    if (auto s = PostGate("all-reduce", &g); !s.ok()) return s;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_UINT16_T,
                            HalfSum(dtype), comm_, &g.req);
    if (auto s = AwaitGated("all-reduce", rc, &g, 1, &g.req, count * 2); !s.ok()) return s;
    Count(CollectiveKind::kAllReduce, AllReduceSent(count, world_), 2);
    return absl::OkStatus();
  }

  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    return AllReduceT(data, count, MPI_FLOAT, op);
  }
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override {
    return AllReduceT(data, count, MPI_DOUBLE, op);
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    if (bytes > INT_MAX) return absl::InvalidArgumentError("Broadcast: too large");
    MpiJob j{MpiJob::kBcast};
    j.recv = data;
    j.count = static_cast<int>(bytes);
    j.root = root;
    if (auto s = Blocking("broadcast", j); !s.ok()) return s;
    Count(CollectiveKind::kBroadcast, rank_ == root ? bytes : 0, 1);
    return absl::OkStatus();
  }

  absl::Status Barrier() override {
    return Blocking("barrier", MpiJob{MpiJob::kBarrier});
  }

  // MPI_Comm_split has no non-blocking form; it meets no timeout.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override {
    if (broken_) return Broken("split");
    MPI_Comm sub;
    if (int rc = MPI_Comm_split(comm_, color, key, &sub); rc != MPI_SUCCESS) {
      return absl::InternalError(absl::StrCat("mpi communicator: MPI_Comm_split: ", MpiError(rc)));
    }
    auto c = std::make_unique<MpiCommunicator>(sub);
    c->set_timeout_seconds(timeout_seconds_);
    return std::unique_ptr<Communicator>(std::move(c));
  }

  absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
    std::vector<int> sc, sd, rc_, rd;
    if (auto s = Displacements(send_counts, &sc, &sd); !s.ok()) return s;
    if (auto s = Displacements(recv_counts, &rc_, &rd); !s.ok()) return s;
    MPI_Datatype t = dtype == DType::kF32 ? MPI_FLOAT : MPI_UINT16_T;
    int64_t sent = 0;
    for (int r = 0; r < world_; ++r) sent += r == rank_ ? 0 : send_counts[r];
    GatedRequests g;
    if (auto s = PostGate("all-to-all", &g); !s.ok()) return s;
    int rc = MPI_Ialltoallv(send, sc.data(), sd.data(), t, recv, rc_.data(), rd.data(), t,
                            comm_, &g.req);
    if (auto s = AwaitGated("all-to-all", rc, &g, 1, &g.req, sent * DTypeSize(dtype)); !s.ok()) {
      return s;
    }
    Count(CollectiveKind::kReduceScatter, sent, DTypeSize(dtype));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override {
    if (broken_) return Broken("duplicate");
    MPI_Comm dup;
    MPI_Request req;
    int rc = MPI_Comm_idup(comm_, &dup, &req);
    if (auto s = Wait(rc, &req, "duplicate"); !s.ok()) return s;
    auto c = std::make_unique<MpiCommunicator>(dup);
    c->set_timeout_seconds(timeout_seconds_);
    return std::unique_ptr<Communicator>(std::move(c));
  }

 private:
  bool DirectPair(const std::vector<int>& c) const {
    return slot_ != nullptr && world_ == 2 && Equal(c);
  }

  // The fp32 reduce-scatter as one exchange of the pieces, summed in
  // libnbc's order (mpi_sum_algorithms.h, PostPieceExchange). Arrival is
  // gated and the wait polled with the timeout, as the collective's was.
  absl::Status ExchangeReduceScatter(const float* send, float* recv,
                                     const std::vector<int64_t>& counts,
                                     const std::vector<int>& c, const std::vector<int>& d) {
    GatedRequests g;
    if (auto s = PostGate("reduce-scatter", &g); !s.ok()) return s;
    const int rc = PostPieceExchange(comm_, rank_, world_, send, c, d, &sums_);
    // Posted requests stay posted on failure (the communicator is broken).
    if (auto s = AwaitGated("reduce-scatter", rc, &g, static_cast<int>(sums_.reqs.size()),
                            sums_.reqs.data(),
                            AllGatherSent(counts, rank_) * static_cast<int64_t>(sizeof(float)));
        !s.ok()) {
      return s;
    }
    SumExchangedPieces(rank_, static_cast<size_t>(c[rank_]), recv, &sums_);
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank_), sizeof(float));
    return absl::OkStatus();
  }

  // Default mode, two ranks: the sum all-reduce on this thread as the ring
  // a 2-rank tuned MPI_Allreduce runs (mpi_sum_algorithms.h, PairAllReduce;
  // bench/README.md, "Collectives on the calling thread").
  template <typename T>
  absl::Status PairAllReduce(T* data, int count, MPI_Datatype t) {
    const char* what = "all-reduce";
    if (broken_) return Broken(what);
    int type_bytes = 1;
    MPI_Type_size(t, &type_bytes);
    const int rc = zero::PairAllReduce(comm_, rank_, data, count, t, gate_, Deadline(),
                                       MpiSerialMutex(),
                                       TransferOptions(int64_t{count} * type_bytes), &sums_);
    if (rc == kArrivalTimedOut) return TimedOut(what);
    if (rc != MPI_SUCCESS) return Failed(what, rc);
    return absl::OkStatus();
  }

  // Direct mode's blocking reduce-scatter of equal pieces (see DirectPair).
  absl::Status DirectReduceScatter(const void* send, void* recv,
                                   const std::vector<int64_t>& counts, MPI_Datatype type,
                                   MPI_Op mop, size_t elem_bytes) {
    MpiJob j{MpiJob::kReduceScatterBlock};
    j.send = send;
    j.recv = recv;
    j.count = static_cast<int>(counts[0]);
    j.type = type;
    j.mop = mop;
    if (auto s = Blocking("reduce-scatter", j); !s.ok()) return s;
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank_), elem_bytes);
    return absl::OkStatus();
  }

  static bool Equal(const std::vector<int>& c) {
    for (int x : c) {
      if (x != c[0]) return false;
    }
    return true;
  }

  template <typename T>
  absl::Status AllReduceT(T* data, int64_t count, MPI_Datatype t, ReduceOp op) {
    if (count > INT_MAX) return absl::InvalidArgumentError("AllReduce: too large");
    if (!slot_ && world_ == 2 && op == ReduceOp::kSum) {
      if (auto s = PairAllReduce(data, static_cast<int>(count), t); !s.ok()) return s;
      Count(CollectiveKind::kAllReduce, AllReduceSent(count, world_), sizeof(T));
      return absl::OkStatus();
    }
    MpiJob j{MpiJob::kAllReduce};
    j.recv = data;
    j.count = static_cast<int>(count);
    j.type = t;
    j.mop = op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
    if (auto s = Blocking("all-reduce", j); !s.ok()) return s;
    Count(CollectiveKind::kAllReduce, AllReduceSent(count, world_), sizeof(T));
    return absl::OkStatus();
  }

  absl::Status Displacements(const std::vector<int64_t>& counts,
                             std::vector<int>* c, std::vector<int>* d) {
    if (static_cast<int>(counts.size()) != world_) {
      return absl::InvalidArgumentError("mpi communicator: counts size != world");
    }
    c->clear();
    d->clear();
    int64_t off = 0;
    for (int64_t n : counts) {
      if (n > INT_MAX || off > INT_MAX) {
        return absl::InvalidArgumentError(
            "mpi communicator: a collective over more than 2^31 elements; "
            "lower reduce_bucket_size / sub_group_size");
      }
      c->push_back(static_cast<int>(n));
      d->push_back(static_cast<int>(off));
      off += n;
    }
    return absl::OkStatus();
  }

  void Abort(const std::string& reason) override {
    std::fprintf(stderr, "[zero] rank %d of %d failed: %s; aborting the job\n", rank_, world_,
                 reason.c_str());
    std::fflush(stderr);
    MarkMpiBroken();
    MPI_Abort(comm_, 1);
    std::_Exit(1);  // MPI_Abort does not return; if it did, the rank still ends
  }

  absl::Status Broken(const char* what) const {
    return absl::AbortedError(absl::StrCat(
        "mpi communicator: ", what, " on rank ", rank_,
        ": an earlier collective timed out; the communicator is unusable"));
  }

  // A blocking collective on the worker thread, waited for until the
  // timeout: a peer that never arrives becomes DeadlineExceeded here (and
  // the communicator is broken) while the worker stays inside MPI. Direct
  // mode calls it here; all-gathers and broadcasts take Polled instead.
  absl::Status Blocking(const char* what, MpiJob job) {
    if (broken_) return Broken(what);
    Worker();
    job.comm = comm_;
    const auto deadline = Deadline();
    job.gate = gate_;
    job.doorbell = doorbell_.get();
    job.deadline = deadline;
    if (slot_) return Direct(what, job);
    if (OnCaller(job)) return Polled(what, job);
    int rc = MPI_SUCCESS;
    // With more threads than cores the caller does not spin: its yields
    // take turns from the worker and the peers the job waits for (the
    // 4-rank all-reduce on 2 cores: 0.90 -> 0.95 of raw MPI at 64K
    // elements, bench/README.md, "Collectives on the calling thread").
    const bool spin = SmallJob(job) && !oversubscribed_;
    if (!worker_->Run(job, deadline, spin, &rc) || rc == kArrivalTimedOut) {
      return TimedOut(what);
    }
    if (rc != MPI_SUCCESS) return Failed(what, rc);
    return absl::OkStatus();
  }

  // Default mode's all-gathers and broadcasts run on the calling thread,
  // at every size: non-blocking, waited with the arrival gate folded in
  // (WaitArrivedAndDone) until the deadline. They move bits only, so
  // libnbc's algorithm gives the result the tuned blocking one would, at
  // raw MPI's speed or better here, where the hand-off to the worker cost
  // 3-8 us per call (bench/README.md, "Collectives on the calling thread").
  static bool OnCaller(const MpiJob& job) {
    return job.op == MpiJob::kAllGather || job.op == MpiJob::kAllGatherV ||
           job.op == MpiJob::kBcast;
  }

  // `job` (OnCaller) on this thread. A peer that never arrives, or stops
  // inside the collective, is a timeout: the request stays pending and the
  // communicator is broken, as with the worker's blocking call.
  absl::Status Polled(const char* what, const MpiJob& j) {
    std::mutex* serial = MpiSerialMutex();
    MPI_Request arrival = MPI_REQUEST_NULL, req = MPI_REQUEST_NULL;
    if (gate_) {
      if (int rc = PostArrival(comm_, &arrival, serial); rc != MPI_SUCCESS) {
        return Failed(what, rc);
      }
    }
    int rc = MPI_ERR_OTHER;
    {
      std::unique_lock<std::mutex> l;
      if (serial != nullptr) l = std::unique_lock<std::mutex>(*serial);
      if (j.op == MpiJob::kAllGather) {
        rc = MPI_Iallgather(j.send, j.count, j.type, j.recv, j.count, j.type, comm_, &req);
      } else if (j.op == MpiJob::kAllGatherV) {
        rc = MPI_Iallgatherv(j.send, j.count, j.type, j.recv, worker_->counts.data(),
                             worker_->displs.data(), j.type, comm_, &req);
      } else if (j.op == MpiJob::kBcast) {
        rc = MPI_Ibcast(j.recv, j.count, j.type, j.root, comm_, &req);
      }
    }
    if (rc != MPI_SUCCESS) return Failed(what, rc);
    int type_bytes = 1;
    MPI_Type_size(j.type, &type_bytes);
    const int64_t bytes =
        static_cast<int64_t>(j.count) * type_bytes * (j.op == MpiJob::kBcast ? 1 : world_);
    rc = WaitArrivedAndDone(gate_ ? &arrival : nullptr, 1, &req, j.deadline, serial,
                            TransferOptions(bytes));
    if (rc == kArrivalTimedOut) return TimedOut(what);
    if (rc != MPI_SUCCESS) return Failed(what, rc);
    return absl::OkStatus();
  }

  // The wait options for a transfer of `bytes` (this rank's view): where
  // waits sleep, only past the time the transfer itself would take at
  // ~4 GB/s (raw MPI's 4-rank all-gather of 4M floats without single-copy
  // here: 5.8 GB/s), and at least 100 us: a fragmented transfer needs a
  // test per fragment (ArrivalGateOptions::transfer_spin).
  ArrivalGateOptions TransferOptions(int64_t bytes) const {
    ArrivalGateOptions options = wait_options_;
    if (options.transfer_max_sleep.count() > 0) {
      options.transfer_spin = std::max(std::chrono::microseconds(100),
                                       std::chrono::microseconds(bytes / 4000));
    }
    return options;
  }

  // Whether `job` moves little enough (its whole result, this rank's
  // view) to end within the caller's spin: 256 KiB, about 100 us on
  // shared memory here (bench/README.md, "Collectives and the stage-1
  // boundary").
  bool SmallJob(const MpiJob& job) const {
    int type_bytes = 1;
    MPI_Type_size(job.type, &type_bytes);
    const bool gather = job.op == MpiJob::kAllGather || job.op == MpiJob::kAllGatherV;
    const int64_t bytes =
        static_cast<int64_t>(job.count) * type_bytes * (gather ? world_ : 1);
    return bytes <= (int64_t{256} << 10);
  }

  // Direct mode: the blocking call on this thread, the watchdog armed. No
  // arrival gate: direct mode is raw MPI's speed and raw MPI's waiting
  // (the gate's barrier would cost 1-7 us per call, bench/README.md).
  absl::Status Direct(const char* what, const MpiJob& job) {
    return DirectCall(what, [&] { return worker_->Execute(job); });
  }

  Clock::time_point Deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeout_seconds_));
  }

  // A non-blocking collective's requests and the arrival gate's barrier
  // posted just before them (MPI_REQUEST_NULL: no gate).
  struct GatedRequests {
    MPI_Request arrival = MPI_REQUEST_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
  };

  // The arrival gate, posted before a non-blocking collective (default
  // mode; none in direct mode) and waited for together with it
  // (AwaitGated): one rendezvous of the ranks per collective, where
  // waiting for the gate first and then for the collective made two, each
  // costing a scheduling delay when the node's cores are shared
  // (bench/README.md, "Waiting under load").
  absl::Status PostGate(const char* what, GatedRequests* g) {
    if (broken_) return Broken(what);
    if (!gate_) return absl::OkStatus();
    const int rc = PostArrival(comm_, &g->arrival, MpiSerialMutex());
    return rc == MPI_SUCCESS ? absl::OkStatus() : Failed(what, rc);
  }

  // Waits for `count` requests posted after PostGate (`rc`: the posting's
  // result) until the timeout: while a peer has not arrived the wait
  // sleeps, then tests back to back, sleeping only past the transfer's
  // time for `bytes` where threads outnumber cores (TransferOptions). A
  // peer that never arrives, or stops inside the collective, is a timeout.
  absl::Status AwaitGated(const char* what, int rc, GatedRequests* g, int count,
                          MPI_Request* reqs, int64_t bytes) {
    if (rc != MPI_SUCCESS) return Failed(what, rc);
    if (slot_) {  // direct mode (no gate): MPI_Wait under the watchdog
      for (int i = 0; i < count; ++i) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        if (auto s = Wait(MPI_SUCCESS, &reqs[i], what); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    rc = WaitArrivedAndDone(gate_ ? &g->arrival : nullptr, count, reqs, Deadline(),
                            MpiSerialMutex(), TransferOptions(bytes));
    if (rc == kArrivalTimedOut) return TimedOut(what);
    if (rc != MPI_SUCCESS) return Failed(what, rc);
    return absl::OkStatus();
  }

  // An MPI call failed: this communicator is unusable from here on.
  absl::Status Failed(const char* what, int rc) {
    broken_ = true;
    MarkMpiBroken();
    return absl::AbortedError(absl::StrCat("mpi communicator: ", what, " failed: ", MpiError(rc)));
  }

  // The deadline passed: this communicator is unusable from here on.
  absl::Status TimedOut(const char* what) {
    broken_ = true;
    MarkMpiBroken();
    return absl::DeadlineExceededError(absl::StrCat(
        "mpi communicator: ", what, " timed out after ", timeout_seconds_, " s on rank ", rank_,
        " of ", world_, ": a peer is dead or stuck (comm_timeout_seconds)"));
  }

  template <typename F>
  absl::Status DirectCall(const char* what, F call) {
    slot_->timeout_s.store(timeout_seconds_, std::memory_order_relaxed);
    slot_->what.store(what, std::memory_order_relaxed);
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            Clock::now().time_since_epoch()).count();
    slot_->deadline_ns.store(now + static_cast<int64_t>(timeout_seconds_ * 1e9),
                             std::memory_order_release);
    int rc;
    if (std::mutex* serial = MpiSerialMutex()) {
      std::lock_guard<std::mutex> l(*serial);
      rc = call();
    } else {
      rc = call();
    }
    slot_->deadline_ns.store(0, std::memory_order_release);
    if (rc != MPI_SUCCESS) return Failed(what, rc);
    return absl::OkStatus();
  }

  // Polls the request until it completes or the timeout passes. Polling
  // (instead of a blocking call) is what turns a dead peer into an error.
  absl::Status Wait(int rc, MPI_Request* req, const char* what) {
    if (broken_) return Broken(what);
    if (rc != MPI_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("mpi communicator: ", what, ": ", MpiError(rc)));
    }
    // Direct mode: MPI_Wait, the watchdog keeping the deadline (the same
    // request, so the same algorithm and bits; no polling, yields or sleeps).
    if (slot_) return DirectCall(what, [&] { return MPI_Wait(req, MPI_STATUS_IGNORE); });
    const auto start = Clock::now();
    bool backoff = false;
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(timeout_seconds_));
    for (unsigned spins = 0;; ++spins) {
      int done = 0;
      rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return Failed(what, rc);
      if (done) return absl::OkStatus();
      if ((spins & 1023) == 1023 && Clock::now() > deadline) return TimedOut(what);
      // Progress happens inside MPI_Test, so poll; when the node's threads
      // outnumber its cores, back off into short sleeps so the peers (and our
      // own compute thread) get the core: spinning would starve them.
      // Most collectives finish within the first millisecond of polling.
      if (oversubscribed_ && !backoff && (spins & 63) == 63 &&
          Clock::now() - start > std::chrono::milliseconds(1)) {
        backoff = true;
        spins = 0;
      }
      if (backoff) {
        // A late peer has no core, and 5 us sleeps plus a test each cost a
        // quarter of the wait in CPU; doubling to the cap costs a few %.
        MpiShortSleep(std::min<std::chrono::microseconds>(
            std::chrono::microseconds(int64_t{5} << std::min(spins, 5u)),
            wait_options_.transfer_max_sleep));
      } else {
        std::this_thread::yield();
      }
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, world_ = 1;
  bool broken_ = false;
  bool oversubscribed_ = false;
  bool ranks_outnumber_cores_ = false;  // RanksOutnumberCores(), read once
  bool gate_ = false;
  ArrivalGateOptions wait_options_;
  BlockingWorker& Worker() {
    if (!worker_) worker_ = BlockingWorker::Make(/*idle_spin=*/!oversubscribed_);
    return *worker_;
  }

  std::shared_ptr<BlockingWorker> worker_;  // made by the first collective
  SumScratch sums_;  // the hand-written sums' buffers and requests
  std::shared_ptr<WatchSlot> slot_;  // direct mode only
  std::shared_ptr<LocalDoorbell> doorbell_;  // null: timed sleeps
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> MakeMpiCommunicator(
    const void* mpi_comm) {
  if (auto s = EnsureMpi(); !s.ok()) return s;
  MPI_Comm base = mpi_comm ? *static_cast<const MPI_Comm*>(mpi_comm) : MPI_COMM_WORLD;
  // Errors come back as statuses, never MPI's abort: libnbc reports some
  // through the world communicator's handler, not the duplicate's.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm dup;
  if (int rc = MPI_Comm_dup(base, &dup); rc != MPI_SUCCESS) {
    return absl::InternalError(absl::StrCat("mpi communicator: MPI_Comm_dup: ", MpiError(rc)));
  }
  return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(dup));
}

}  // namespace zero
