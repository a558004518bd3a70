#include "core/comm/nccl_communicator.h"

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"

namespace zero {
namespace {

using Clock = std::chrono::steady_clock;

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

absl::Status EnsureMpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return absl::OkStatus();
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) !=
      MPI_SUCCESS) {
    return absl::InternalError("nccl communicator: MPI_Init_thread failed");
  }
  std::atexit(FinalizeAtExit);
  return absl::OkStatus();
}

Clock::time_point Deadline(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

// Sleeps a little longer the longer a wait lasts: spinning would starve the
// proxy threads NCCL itself needs.
void Backoff(int spins) {
  if (spins > 64) {
    std::this_thread::sleep_for(
        std::chrono::microseconds(spins > 2000 ? 200 : 10));
  }
}

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;  // init, abort and collectives never block the caller
  return c;
}

// Waits for a nonblocking init/split/finalize to leave ncclInProgress.
ncclResult_t WaitReady(ncclComm_t comm, Clock::time_point deadline,
                       bool* timed_out) {
  *timed_out = false;
  for (int spins = 0;; ++spins) {
    ncclResult_t st = ncclInProgress;
    ncclResult_t r = ncclCommGetAsyncError(comm, &st);
    if (r != ncclSuccess) return r;
    if (st != ncclInProgress) return st;
    if (Clock::now() > deadline) {
      *timed_out = true;
      return ncclInProgress;
    }
    Backoff(spins);
  }
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world, int device,
                   cudaStream_t stream, bool own_stream,
                   cudaStream_t wait_stream)
      : comm_(comm),
        rank_(rank),
        world_(world),
        device_(device),
        stream_(stream),
        own_stream_(own_stream),
        wait_stream_(wait_stream) {
    cudaSetDevice(device_);
    cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
    cudaMalloc(&scratch_, sizeof(float));
    cudaMemset(scratch_, 0, sizeof(float));
  }

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (comm_ != nullptr) {
      bool timed_out = false;
      ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) {
        r = WaitReady(comm_, Deadline(timeout_seconds_), &timed_out);
      }
      if (timed_out || r != ncclSuccess) {
        ncclCommAbort(comm_);
      } else {
        ncclCommDestroy(comm_);
      }
    }
    cudaStreamSynchronize(stream_);
    if (scratch_) cudaFree(scratch_);
    if (ready_) cudaEventDestroy(ready_);
    if (own_stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend_name() const override { return "nccl"; }
  bool device_memory() const override { return true; }
  int device_ordinal() const override { return device_; }

  absl::Status AllGatherV(const void* send, void* recv,
                          const std::vector<int64_t>& counts,
                          DType dtype) override {
    if (auto s = CheckCounts(counts); !s.ok()) return s;
    const size_t esz = DTypeSize(dtype);
    char* out = static_cast<char*>(recv);
    absl::Status s = Run("all-gather", [&]() -> ncclResult_t {
      if (Equal(counts)) {
        size_t bytes = counts[0] * esz;
        if (bytes == 0) return ncclSuccess;
        return ncclAllGather(send, out, bytes, ncclInt8, comm_, stream_);
      }
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      size_t off = 0;
      for (int p = 0; p < world_ && r == ncclSuccess; ++p) {
        size_t bytes = counts[p] * esz;
        if (bytes > 0) {
          const void* src = p == rank_ ? send : out + off;
          r = ncclBroadcast(src, out + off, bytes, ncclInt8, p, comm_,
                            stream_);
        }
        off += bytes;
      }
      ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
    });
    if (s.ok()) Count(CollectiveKind::kAllGather, AllGatherSent(counts, rank_), esz);
    return s;
  }

  absl::Status ReduceScatterV(const float* send, float* recv,
                              const std::vector<int64_t>& counts) override {
    return ReduceScatterBytes(send, recv, counts, ncclFloat32, sizeof(float));
  }
  absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                  const std::vector<int64_t>& counts, DType dtype) override {
    return ReduceScatterBytes(send, recv, counts,
                              dtype == DType::kF16 ? ncclFloat16 : ncclBfloat16, 2);
  }
  absl::Status AllReduceHalf(void* data, int64_t count, DType dtype) override {
    absl::Status s = Run("all-reduce", [&]() -> ncclResult_t {
      if (count == 0) return ncclSuccess;
      return ncclAllReduce(data, data, count,
                           dtype == DType::kF16 ? ncclFloat16 : ncclBfloat16, ncclSum, comm_,
                           stream_);
    });
    if (s.ok()) Count(CollectiveKind::kAllReduce, AllReduceSent(count, world_), 2);
    return s;
  }

  // Sums `send` over ranks (elements of `t`, `es` bytes); rank r keeps
  // piece r in `recv`.
  absl::Status ReduceScatterBytes(const void* send_v, void* recv_v,
                                  const std::vector<int64_t>& counts, ncclDataType_t t,
                                  size_t es) {
    if (auto s = CheckCounts(counts); !s.ok()) return s;
    const char* send = static_cast<const char*>(send_v);
    char* recv = static_cast<char*>(recv_v);
    absl::Status s = Run("reduce-scatter", [&]() -> ncclResult_t {
      if (Equal(counts)) {
        if (counts[0] == 0) return ncclSuccess;
        return ncclReduceScatter(send, recv, counts[0], t, ncclSum, comm_, stream_);
      }
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      int64_t off = 0;
      for (int p = 0; p < world_ && r == ncclSuccess; ++p) {
        if (counts[p] > 0) {
          // recvbuff matters only on the root p.
          char* dst = p == rank_ ? recv : const_cast<char*>(send) + off * es;
          r = ncclReduce(send + off * es, dst, counts[p], t, ncclSum, p, comm_, stream_);
        }
        off += counts[p];
      }
      ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
    });
    if (s.ok()) {
      Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank_), es);
    }
    return s;
  }

  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    return AllReduceT(data, count, ncclFloat32, op);
  }
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override {
    return AllReduceT(data, count, ncclFloat64, op);
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    if (root < 0 || root >= world_) {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl communicator: broadcast root ", root));
    }
    absl::Status s = Run("broadcast", [&]() -> ncclResult_t {
      if (bytes == 0) return ncclSuccess;
      return ncclBroadcast(data, data, bytes, ncclInt8, root, comm_, stream_);
    });
    if (s.ok()) Count(CollectiveKind::kBroadcast, rank_ == root ? bytes : 0, 1);
    return s;
  }

  // NCCL has no way to tell peers; the job is bootstrapped over MPI, so
  // abort it there after freeing the GPU side.
  void Abort(const std::string& reason) override {
    std::fprintf(stderr, "[zero] rank %d of %d failed: %s; aborting the job\n", rank_,
                 world_size(), reason.c_str());
    std::fflush(stderr);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    broken_ = true;
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

  absl::Status Barrier() override {
    return Run("barrier", [&]() {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_,
                           stream_);
    });
  }

  void set_wait_stream(void* stream) override {
    wait_stream_ = static_cast<cudaStream_t>(stream);
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override {
    return SplitComm("duplicate", 0, rank_);
  }

  // ncclCommSplit: the hierarchical modes' node and cross-node groups
  // (core/comm/topology.h) on the device, without a second bootstrap.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override {
    if (color < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl communicator: split color ", color, " < 0 on rank ", rank_));
    }
    return SplitComm("split", color, key);
  }

  // One NCCL group of point-to-point calls (qgZ's cross-node exchange).
  absl::Status AllToAllV(const void* send_v, const std::vector<int64_t>& send_counts,
                         void* recv_v, const std::vector<int64_t>& recv_counts,
                         DType dtype) override {
    if (auto s = CheckCounts(send_counts); !s.ok()) return s;
    if (auto s = CheckCounts(recv_counts); !s.ok()) return s;
    const size_t esz = DTypeSize(dtype);
    const char* send = static_cast<const char*>(send_v);
    char* recv = static_cast<char*>(recv_v);
    int64_t sent = 0;
    absl::Status s = Run("all-to-all", [&]() -> ncclResult_t {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      size_t soff = 0, roff = 0;
      for (int p = 0; p < world_ && r == ncclSuccess; ++p) {
        const size_t sb = send_counts[p] * esz, rb = recv_counts[p] * esz;
        if (sb > 0) r = ncclSend(send + soff, sb, ncclInt8, p, comm_, stream_);
        if (r == ncclSuccess && rb > 0) r = ncclRecv(recv + roff, rb, ncclInt8, p, comm_, stream_);
        soff += sb;
        roff += rb;
      }
      ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
    });
    for (int p = 0; p < world_; ++p) {
      if (p != rank_) sent += send_counts[p];
    }
    if (s.ok()) Count(CollectiveKind::kReduceScatter, sent, esz);
    return s;
  }

 private:
  template <typename T>
  absl::Status AllReduceT(T* data, int64_t count, ncclDataType_t t,
                          ReduceOp op) {
    absl::Status s = Run("all-reduce", [&]() -> ncclResult_t {
      if (count == 0) return ncclSuccess;
      return ncclAllReduce(data, data, count, t,
                           op == ReduceOp::kSum ? ncclSum : ncclMax, comm_,
                           stream_);
    });
    if (s.ok()) Count(CollectiveKind::kAllReduce, AllReduceSent(count, world_), sizeof(T));
    return s;
  }

  // ncclCommSplit into a new communicator with its own stream; rank and
  // size come from NCCL (ranked by key, then rank, like MPI_Comm_split).
  absl::StatusOr<std::unique_ptr<Communicator>> SplitComm(const char* what, int color,
                                                          int key) {
    if (broken_) return Broken(what);
    cudaSetDevice(device_);
    ncclConfig_t config = NonBlockingConfig();
    ncclComm_t sub = nullptr;
    ncclResult_t r = ncclCommSplit(comm_, color, key, &sub, &config);
    bool timed_out = false;
    const Clock::time_point deadline = Deadline(timeout_seconds_);
    // A nonblocking split runs as a job of the parent's group: it may return
    // ncclSuccess with `sub` still null (NCCL 2.28 on the H200 did), and
    // fills `sub` when the job ends. So wait on the parent (polling it
    // completes the job), then for `sub`, then on the child's own init, as
    // PyTorch's ProcessGroupNCCL does (NVIDIA/nccl#1472).
    if (r == ncclSuccess || r == ncclInProgress) {
      r = WaitReady(comm_, deadline, &timed_out);
      for (int spins = 0; !timed_out && r == ncclSuccess &&
                          __atomic_load_n(&sub, __ATOMIC_ACQUIRE) == nullptr;
           ++spins) {
        if (Clock::now() > deadline) timed_out = true;
        Backoff(spins);
      }
      if (!timed_out && r == ncclSuccess) r = WaitReady(sub, deadline, &timed_out);
    }
    int sub_rank = -1, sub_world = 0;
    if (!timed_out && r == ncclSuccess) {
      r = ncclCommUserRank(sub, &sub_rank);
      if (r == ncclSuccess) r = ncclCommCount(sub, &sub_world);
    }
    if (timed_out || r != ncclSuccess) {
      if (sub != nullptr) ncclCommAbort(sub);
      return Fail(what, r, timed_out);
    }
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
      ncclCommDestroy(sub);
      return absl::InternalError(absl::StrCat("nccl communicator: ", what, ": no stream"));
    }
    auto c = std::make_unique<NcclCommunicator>(sub, sub_rank, sub_world, device_, stream,
                                                true, wait_stream_);
    c->set_timeout_seconds(timeout_seconds_);
    return std::unique_ptr<Communicator>(std::move(c));
  }

  static bool Equal(const std::vector<int64_t>& counts) {
    for (int64_t c : counts)
      if (c != counts[0]) return false;
    return true;
  }

  absl::Status CheckCounts(const std::vector<int64_t>& counts) const {
    if (static_cast<int>(counts.size()) != world_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl communicator: ", counts.size(), " counts for ", world_,
          " ranks"));
    }
    for (int64_t c : counts) {
      if (c < 0) return absl::InvalidArgumentError("nccl communicator: count < 0");
    }
    return absl::OkStatus();
  }

  absl::Status Broken(const char* what) const {
    return absl::AbortedError(absl::StrCat(
        "nccl communicator: ", what, " on rank ", rank_,
        ": an earlier collective failed or timed out; the communicator was "
        "aborted"));
  }

  // Aborts the communicator and describes why.
  absl::Status Fail(const char* what, ncclResult_t r, bool timed_out) {
    std::string detail =
        timed_out ? "" : absl::StrCat(ncclGetErrorString(r), " ",
                                      comm_ ? ncclGetLastError(comm_) : "");
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    broken_ = true;
    if (timed_out) {
      return absl::DeadlineExceededError(absl::StrCat(
          "nccl communicator: ", what, " timed out after ", timeout_seconds_,
          " s on rank ", rank_, " of ", world_,
          ": a peer is dead or stuck (comm_timeout_seconds); aborted"));
    }
    return absl::AbortedError(absl::StrCat("nccl communicator: ", what,
                                           " failed on rank ", rank_, ": ",
                                           detail));
  }

  // Enqueues `enqueue` on stream_ after wait_stream_'s current work and
  // waits for it to finish, bounded by the timeout.
  absl::Status Run(const char* what, const std::function<ncclResult_t()>& enqueue) {
    if (broken_) return Broken(what);
    cudaSetDevice(device_);
    if (wait_stream_ != nullptr) {
      if (cudaEventRecord(ready_, wait_stream_) != cudaSuccess ||
          cudaStreamWaitEvent(stream_, ready_, 0) != cudaSuccess) {
        return absl::InternalError(absl::StrCat(
            "nccl communicator: ", what, ": cannot order after compute: ",
            cudaGetErrorString(cudaGetLastError())));
      }
    }
    ncclResult_t r = enqueue();
    if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl communicator: ", what, ": ", ncclGetErrorString(r), " ",
          ncclGetLastError(comm_)));
    }
    if (r != ncclSuccess && r != ncclInProgress) return Fail(what, r, false);
    const auto deadline = Deadline(timeout_seconds_);
    for (int spins = 0;; ++spins) {
      ncclResult_t st = ncclInProgress;
      ncclResult_t q = ncclCommGetAsyncError(comm_, &st);
      if (q != ncclSuccess) return Fail(what, q, false);
      if (st != ncclSuccess && st != ncclInProgress) return Fail(what, st, false);
      if (st == ncclSuccess) {
        cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return absl::OkStatus();
        if (e != cudaErrorNotReady) {
          broken_ = true;
          ncclCommAbort(comm_);
          comm_ = nullptr;
          return absl::InternalError(absl::StrCat(
              "nccl communicator: ", what, ": CUDA error ",
              cudaGetErrorString(e), "; aborted"));
        }
      }
      if (Clock::now() > deadline) return Fail(what, ncclInProgress, true);
      Backoff(spins);
    }
  }

  ncclComm_t comm_;
  const int rank_, world_, device_;
  cudaStream_t stream_;
  const bool own_stream_;
  cudaStream_t wait_stream_;
  cudaEvent_t ready_ = nullptr;
  void* scratch_ = nullptr;
  bool broken_ = false;
};

// MPI_Bcast of the unique id, polled so a missing rank 0 is a timeout.
absl::Status BroadcastId(ncclUniqueId* id, MPI_Comm comm,
                         Clock::time_point deadline) {
  MPI_Request req;
  if (MPI_Ibcast(id, sizeof(*id), MPI_BYTE, 0, comm, &req) != MPI_SUCCESS) {
    return absl::InternalError("nccl communicator: MPI_Ibcast of the id failed");
  }
  for (int spins = 0;; ++spins) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return absl::InternalError("nccl communicator: MPI_Test failed");
    }
    if (done) return absl::OkStatus();
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          "nccl communicator: bootstrap: the unique id broadcast timed out");
    }
    Backoff(spins);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    const NcclOptions& o) {
  if (auto s = EnsureMpi(); !s.ok()) return s;
  MPI_Comm mpi =
      o.mpi_comm ? *static_cast<const MPI_Comm*>(o.mpi_comm) : MPI_COMM_WORLD;
  int rank = 0, world = 1;
  MPI_Comm_rank(mpi, &rank);
  MPI_Comm_size(mpi, &world);
  if (cudaError_t e = cudaSetDevice(o.cuda_device); e != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nccl communicator: cudaSetDevice(", o.cuda_device, "): ",
        cudaGetErrorString(e)));
  }
  const auto deadline = Deadline(o.timeout_seconds);
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return absl::InternalError(absl::StrCat(
          "nccl communicator: ncclGetUniqueId: ", ncclGetErrorString(r)));
    }
  }
  if (auto s = BroadcastId(&id, mpi, deadline); !s.ok()) return s;

  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, world, id, rank, &config);
  bool timed_out = false;
  if (r == ncclSuccess || r == ncclInProgress) {
    r = WaitReady(comm, deadline, &timed_out);
  }
  if (timed_out || r != ncclSuccess) {
    std::string why = timed_out ? "timed out (a rank did not join)"
                                : ncclGetErrorString(r);
    if (comm != nullptr) ncclCommAbort(comm);
    absl::StatusCode code = timed_out ? absl::StatusCode::kDeadlineExceeded
                                      : absl::StatusCode::kInternal;
    return absl::Status(code, absl::StrCat("nccl communicator: init on rank ",
                                           rank, " of ", world, ": ", why));
  }
  cudaStream_t stream = static_cast<cudaStream_t>(o.stream);
  bool own = stream == nullptr;
  if (own && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) !=
                 cudaSuccess) {
    ncclCommDestroy(comm);
    return absl::InternalError("nccl communicator: cannot create a stream");
  }
  auto c = std::make_unique<NcclCommunicator>(
      comm, rank, world, o.cuda_device, stream, own,
      static_cast<cudaStream_t>(o.wait_stream));
  c->set_timeout_seconds(o.timeout_seconds);
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace zero
