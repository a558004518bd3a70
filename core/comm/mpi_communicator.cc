#include "core/comm/mpi_communicator.h"

#include <mpi.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <mutex>
#include <thread>
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/comm/mpi_arrival_gate.h"
#include "kernels/cast_math.h"

namespace zero {
namespace {

using Clock = std::chrono::steady_clock;

// Set once any collective timed out: its request can never complete, and
// MPI_Finalize would wait for it forever, so the exit handler skips it.
std::atomic<bool> g_broken{false};
std::atomic<bool> g_we_initialized{false};
// Below MPI_THREAD_MULTIPLE (MPI initialized by the application with
// SERIALIZED), the workers of different communicators take turns.
std::atomic<bool> g_serialize{false};
std::mutex g_serial_mu;

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_broken.load()) MPI_Finalize();
}

// Ranks on this node (OpenMPI tells; else one per node is assumed) and the
// node's cores.
unsigned LocalRanks() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return local ? static_cast<unsigned>(std::atoi(local)) : 1;
}
unsigned Cores() { return std::max(1u, std::thread::hardware_concurrency()); }

// Whether this node's ranks, each with a compute thread and a comm thread
// that waits in MPI, outnumber its cores.
bool ThreadsOutnumberCores() { return 2 * LocalRanks() > Cores(); }

// Whether this node's ranks alone outnumber its cores (OpenMPI then yields
// in its progress loop by itself).
bool RanksOutnumberCores() { return LocalRanks() > Cores(); }

absl::Status EnsureMpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    g_serialize = provided < MPI_THREAD_MULTIPLE;
    if (provided < MPI_THREAD_SERIALIZED) {
      return absl::FailedPreconditionError(
          "mpi communicator: MPI was initialized without thread support "
          "(need MPI_THREAD_SERIALIZED or MULTIPLE); zero runs communication "
          "on its own thread");
    }
    return absl::OkStatus();
  }
  // OpenMPI's blocking calls spin in their progress loop while they wait
  // (for a peer, or for a peer's comm thread to get a core mid-transfer);
  // with more threads than cores that spin is taken from the compute
  // threads. mpi_yield_when_idle makes the loop yield the core when it
  // made no progress: OpenMPI sets it itself only when the ranks outnumber
  // the node's slots, not when their threads do (bench/README.md, "Waiting
  // without spinning"). The user's own setting wins; an application that
  // initialized MPI itself keeps its own.
  // With more ranks than cores OpenMPI decides itself (setting it there
  // made the C engine's stage-3 step ~20 % slower at 4 ranks on 2 cores).
  const bool yield = ThreadsOutnumberCores() && !RanksOutnumberCores() &&
                     std::getenv("OMPI_MCA_mpi_yield_when_idle") == nullptr;
  if (yield) setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
  int provided = 0;
  const int init_rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (yield) unsetenv("OMPI_MCA_mpi_yield_when_idle");  // not inherited by children
  if (init_rc != MPI_SUCCESS) {
    return absl::InternalError("mpi communicator: MPI_Init_thread failed");
  }
  g_we_initialized = true;
  g_serialize = provided < MPI_THREAD_MULTIPLE;
  std::atexit(FinalizeAtExit);
  return absl::OkStatus();
}

// Sums of fp16 / bf16 elements (MPI_UINT16_T bits) for MPI_SUM's place:
// each partial sum is computed in fp32 and rounded to the format.
void SumF16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = math::FloatToHalf(math::HalfToFloat(a[i]) + math::HalfToFloat(b[i]));
  }
}
void SumBf16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = math::FloatToBf16(math::Bf16ToFloat(a[i]) + math::Bf16ToFloat(b[i]));
  }
}
MPI_Op HalfSum(DType t) {
  static MPI_Op f16 = MPI_OP_NULL, bf16 = MPI_OP_NULL;
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_Op_create(&SumF16, 1, &f16);
    MPI_Op_create(&SumBf16, 1, &bf16);
  });
  return t == DType::kF16 ? f16 : bf16;
}

std::string MpiError(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

// One blocking collective, described by value: posting it allocates
// nothing (a std::function holding the counts did, per call).
struct Job {
  enum Op { kAllGather, kAllGatherV, kAllReduce, kBcast, kBarrier, kReduceScatterBlock } op;
  const void* send = nullptr;
  void* recv = nullptr;
  int count = 0;  // per rank (all-gather, reduce-scatter) or in total
  MPI_Datatype type = MPI_BYTE;
  MPI_Op mop = MPI_OP_NULL;
  int root = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  // Whether to wait in the arrival gate first, and until when.
  bool gate = false;
  Clock::time_point deadline = Clock::time_point::max();
};

std::mutex* SerialMutex() {
  return g_serialize.load(std::memory_order_relaxed) ? &g_serial_mu : nullptr;
}

// Runs blocking MPI collectives for one communicator on its own thread
// (docs/ARCHITECTURE.md, "Failures"): the all-reduce, whose tuned algorithm
// is faster than libnbc's non-blocking one and sums in the order every fp32
// result recorded so far has (all-gathers and broadcasts move bits only and
// run on the calling thread instead: MpiCommunicator::Polled); running them
// here lets the calling thread wait with a deadline
// and return a timeout when a peer is dead or stuck, while this thread stays
// inside MPI (it is detached then: the communicator is broken, and the job
// ends without MPI_Finalize). Shared with the communicator by a shared_ptr,
// so a stuck worker never outlives what it touches: the all-gather-v counts
// live here too (written only while no job runs).
class BlockingWorker : public std::enable_shared_from_this<BlockingWorker> {
 public:
  // The thread starts with the first job handed to Run (never in direct
  // mode, where the caller runs every job, nor for a communicator whose
  // collectives all run on the caller).
  static std::shared_ptr<BlockingWorker> Make() {
    return std::shared_ptr<BlockingWorker>(new BlockingWorker());
  }

  std::vector<int> counts, displs;

  // Runs `job` on the worker; waits until it returns or `deadline`
  // passes. false: timed out (the job still runs). `spin`: whether to spin
  // before sleeping (a small job).
  bool Run(const Job& job, Clock::time_point deadline, bool spin, int* rc) {
    if (!started_) {
      started_ = true;
      std::thread([w = shared_from_this()] { w->Loop(); }).detach();
    }
    const uint64_t seq = posted_.load(std::memory_order_relaxed) + 1;
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = job;
      posted_.store(seq, std::memory_order_release);
      if (worker_sleeping_) cv_job_.notify_one();
    }
    // Most small collectives end within tens of microseconds: spin on the
    // flag (yielding the core) before sleeping on the condition variable.
    // A large one takes longer than the spin, which would only take the
    // core from the threads it waits for (bench/README.md, "Stage 3's
    // runtime threads": a fifth of the comm stream's CPU at stage 3).
    const auto spin_until = Clock::now() + std::chrono::microseconds(200);
    for (unsigned i = 0; spin; ++i) {
      if (finished_.load(std::memory_order_acquire) >= seq) {
        *rc = rc_.load(std::memory_order_relaxed);
        return true;
      }
      if ((i & 15) == 15 && Clock::now() > spin_until) break;
      std::this_thread::yield();
    }
    std::unique_lock<std::mutex> l(mu_);
    caller_sleeping_ = true;
    const bool done = cv_done_.wait_until(
        l, deadline, [&] { return finished_.load(std::memory_order_acquire) >= seq; });
    caller_sleeping_ = false;
    if (done) *rc = rc_.load(std::memory_order_relaxed);
    return done;
  }

  void Stop() {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    cv_job_.notify_one();
  }

  // Runs `j` on the calling thread (the worker's loop, or a direct call)
  // once every rank has arrived (mpi_arrival_gate.h: the blocking call
  // itself would busy-poll through the wait). A barrier is the gate alone.
  // kArrivalTimedOut: the peers did not arrive by the job's deadline.
  int ExecuteGated(const Job& j) {
    if (j.gate) {
      const int rc = WaitForArrival(j.comm, j.deadline, SerialMutex());
      if (rc != MPI_SUCCESS || j.op == Job::kBarrier) return rc;
    }
    if (std::mutex* serial = SerialMutex()) {
      std::lock_guard<std::mutex> l(*serial);
      return Execute(j);
    }
    return Execute(j);
  }

  int Execute(const Job& j) {
    switch (j.op) {
      case Job::kAllGather:
        return MPI_Allgather(j.send, j.count, j.type, j.recv, j.count, j.type, j.comm);
      case Job::kAllGatherV:
        return MPI_Allgatherv(j.send, j.count, j.type, j.recv, counts.data(), displs.data(),
                              j.type, j.comm);
      case Job::kAllReduce:
        return MPI_Allreduce(MPI_IN_PLACE, j.recv, j.count, j.type, j.mop, j.comm);
      case Job::kBcast:
        return MPI_Bcast(j.recv, j.count, j.type, j.root, j.comm);
      case Job::kBarrier:
        return MPI_Barrier(j.comm);
      case Job::kReduceScatterBlock:
        return MPI_Reduce_scatter_block(j.send, j.recv, j.count, j.type, j.mop, j.comm);
    }
    return MPI_ERR_OTHER;
  }

 private:
  BlockingWorker() = default;

  void Loop() {
    pthread_setname_np(pthread_self(), "zero-mpi");
    uint64_t seq = 0;
    for (;;) {
      // A burst of collectives follows one another closely: spin a little
      // for the next one before sleeping (the job is read without the lock
      // then: posted_'s release store orders it).
      const auto spin_until = Clock::now() + std::chrono::microseconds(100);
      for (unsigned i = 0; posted_.load(std::memory_order_acquire) <= seq; ++i) {
        if ((i & 15) == 15 && Clock::now() > spin_until) break;
        std::this_thread::yield();
      }
      Job job;
      {
        std::unique_lock<std::mutex> l(mu_);
        if (posted_.load(std::memory_order_acquire) <= seq && !stop_) {
          worker_sleeping_ = true;
          cv_job_.wait(l, [&] { return stop_ || posted_.load(std::memory_order_acquire) > seq; });
          worker_sleeping_ = false;
        }
        if (stop_) return;
        job = job_;
        ++seq;
      }
      const int rc = ExecuteGated(job);
      rc_.store(rc, std::memory_order_relaxed);
      finished_.store(seq, std::memory_order_release);
      // The caller sets caller_sleeping_ under mu_ and then re-checks
      // finished_ before sleeping: taking mu_ here closes that window.
      // The notify comes after the unlock, so the woken caller does not
      // block on mu_ straight away (bench/README.md, "Collectives on the
      // calling thread": the 4-rank all-reduce's hand-off).
      bool wake = false;
      {
        std::lock_guard<std::mutex> l(mu_);
        wake = caller_sleeping_;
      }
      if (wake) cv_done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_job_, cv_done_;
  Job job_{Job::kBarrier};
  std::atomic<uint64_t> posted_{0}, finished_{0};
  std::atomic<int> rc_{MPI_SUCCESS};
  bool stop_ = false, worker_sleeping_ = false, caller_sleeping_ = false;
  bool started_ = false;  // only the caller touches it
};

// Direct mode (ZERO_MPI_WATCHDOG=1, docs/ARCHITECTURE.md "Failures"): the
// calling thread makes the blocking MPI call itself, which costs what raw
// MPI costs (handing each call to the worker costs 3-4 us, most of a 64K
// element all-gather on shared memory). A call stuck in MPI cannot be made
// to return, so the deadline is enforced by this process-wide thread, as
// PyTorch's NCCL watchdog does: past it, the rank prints the timeout
// (rank, collective, seconds) and ends the job. Each communicator in
// direct mode holds a slot; a call arms it with its deadline and disarms
// it when MPI returns: two clock reads and two stores per call.
struct WatchSlot {
  std::atomic<int64_t> deadline_ns{0};  // 0: no call in MPI
  std::atomic<const char*> what{""};
  int rank = 0, world = 1;
  std::atomic<double> timeout_s{0};
};

class Watchdog {
 public:
  static Watchdog& Get() {
    static Watchdog* w = new Watchdog();  // never destroyed: it may be firing
    return *w;
  }
  void Add(const std::shared_ptr<WatchSlot>& slot) {
    std::lock_guard<std::mutex> l(mu_);
    slots_.push_back(slot);
    if (!started_) {
      started_ = true;
      std::thread([this] { Loop(); }).detach();
    }
  }

 private:
  void Loop() {
    pthread_setname_np(pthread_self(), "zero-watchdog");
    for (;;) {
      // Ten checks a second at most, and at least four per shortest timeout.
      double period = 0.1;
      std::shared_ptr<WatchSlot> late;
      {
        std::lock_guard<std::mutex> l(mu_);
        const int64_t now = NowNs();
        for (auto it = slots_.begin(); it != slots_.end();) {
          auto s = it->lock();
          if (!s) {
            it = slots_.erase(it);
            continue;
          }
          period = std::min(period, std::max(0.001, s->timeout_s.load() / 4));
          const int64_t d = s->deadline_ns.load(std::memory_order_acquire);
          if (d != 0 && now > d && !late) late = s;
          ++it;
        }
      }
      if (late) Fire(*late);
      std::this_thread::sleep_for(std::chrono::duration<double>(period));
    }
  }

  [[noreturn]] static void Fire(const WatchSlot& s) {
    g_broken = true;
    std::fprintf(stderr,
                 "[zero] DEADLINE_EXCEEDED: mpi communicator: %s timed out after %g s on rank "
                 "%d of %d: a peer is dead or stuck (comm_timeout_seconds); the call blocks in "
                 "MPI (ZERO_MPI_WATCHDOG=1), so the job is ended\n",
                 s.what.load(), s.timeout_s.load(), s.rank, s.world);
    std::fflush(stdout);
    std::fflush(stderr);
    // The peers that waited on the same collective time out within the
    // same moment: let them say so before the abort ends every rank.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    if (!g_serialize.load()) MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // mpirun ends the job when a rank exits without finalizing
  }

  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               Clock::now().time_since_epoch()).count();
  }

  std::mutex mu_;
  std::vector<std::weak_ptr<WatchSlot>> slots_;
  bool started_ = false;
};

bool DirectModeFromEnv() {
  const char* e = std::getenv("ZERO_MPI_WATCHDOG");
  return e != nullptr && std::strcmp(e, "1") == 0;
}

// Sums the W pieces of `n` floats (`piece[r]`: rank r's) into `out` in
// the order of libnbc's reduce-scatter (OpenMPI 4.1, nbc_ireduce_scatter*.c:
// a binomial reduce to rank 0, then a scatter): in round k = 1, 2, ...,
// every rank a with a % 2^k == 0 adds in what rank a + 2^(k-1) holds, if
// there is one; rank 0 ends with the sum. So at 4 ranks (p0 + p1) + (p2 +
// p3), at 3 (p0 + p1) + p2: fp32 addition commutes, so only this grouping
// decides the bits. Partial sums overwrite the pieces in the caller's
// scratch; `piece[own]` (the caller's send buffer) is never written: its
// partial sums go to `out`, as does the last round's.
void TreeSumInto(std::vector<const float*> piece, int own, size_t n, float* out) {
  const int w = static_cast<int>(piece.size());
  int rounds = 0;
  while ((1 << rounds) < w) ++rounds;
  for (int k = 1; k <= rounds; ++k) {
    const int half = 1 << (k - 1);
    for (int a = 0; a + half < w; a += 2 * half) {
      const float* x = piece[a];
      const float* y = piece[a + half];
      float* dst = (k == rounds || a == own) ? out : const_cast<float*>(x);
#pragma omp simd
      for (size_t i = 0; i < n; ++i) dst[i] = x[i] + y[i];
      piece[a] = dst;
    }
  }
  if (w == 1) std::copy(piece[0], piece[0] + n, out);
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
    // No gate there, and no core for a late peer: once a wait outlasts the
    // transfer the calling thread's polls sleep between tests, up to 80 us
    // (ArrivalGateOptions::transfer_max_sleep; Wait's too, after 1 ms).
    if (ranks_outnumber_cores_) {
      wait_options_.transfer_max_sleep = std::chrono::microseconds(80);
    }
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
    Job j{Job::kAllGather};
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
    if (!Equal(c)) j.op = Job::kAllGatherV;
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
    if (auto s = Gate("reduce-scatter"); !s.ok()) return s;
    MPI_Request req;
    int rc = Equal(c) ? MPI_Ireduce_scatter_block(send, recv, c[0], MPI_FLOAT,
                                                  MPI_SUM, comm_, &req)
                      : MPI_Ireduce_scatter(send, recv, c.data(), MPI_FLOAT,
                                            MPI_SUM, comm_, &req);
    if (auto s = Wait(rc, &req, "reduce-scatter"); !s.ok()) return s;
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
    if (auto s = Gate("reduce-scatter"); !s.ok()) return s;
    MPI_Request req;
    int rc = Equal(c) ? MPI_Ireduce_scatter_block(send, recv, c[0], MPI_UINT16_T, op, comm_, &req)
                      : MPI_Ireduce_scatter(send, recv, c.data(), MPI_UINT16_T, op, comm_, &req);
    if (auto s = Wait(rc, &req, "reduce-scatter"); !s.ok()) return s;
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank_), 2);
    return absl::OkStatus();
  }

  absl::Status AllReduceHalf(void* data, int64_t count, DType dtype) override {
    if (count > INT_MAX) return absl::InvalidArgumentError("AllReduce: too large");
    if (auto s = Gate("all-reduce"); !s.ok()) return s;
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_UINT16_T,
                            HalfSum(dtype), comm_, &req);
    if (auto s = Wait(rc, &req, "all-reduce"); !s.ok()) return s;
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
    Job j{Job::kBcast};
    j.recv = data;
    j.count = static_cast<int>(bytes);
    j.root = root;
    if (auto s = Blocking("broadcast", j); !s.ok()) return s;
    Count(CollectiveKind::kBroadcast, rank_ == root ? bytes : 0, 1);
    return absl::OkStatus();
  }

  absl::Status Barrier() override {
    return Blocking("barrier", Job{Job::kBarrier});
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
    if (auto s = Gate("all-to-all"); !s.ok()) return s;
    MPI_Request req;
    int rc = MPI_Ialltoallv(send, sc.data(), sd.data(), t, recv, rc_.data(), rd.data(), t,
                            comm_, &req);
    if (auto s = Wait(rc, &req, "all-to-all"); !s.ok()) return s;
    int64_t sent = 0;
    for (int r = 0; r < world_; ++r) sent += r == rank_ ? 0 : send_counts[r];
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

  // The fp32 reduce-scatter as one exchange of the pieces (each rank sends
  // piece q to rank q) into a scratch this communicator keeps, then the
  // sums here, in libnbc's order (TreeSumInto): the same bits as
  // MPI_Ireduce_scatter(_block), which reduces the whole vector to rank 0
  // along a binomial tree and scatters it. libnbc allocated a temporary of
  // the whole vector per call, which with a fixed mmap threshold was fresh
  // pages every time: a page fault per 4 KiB received and an munmap, a
  // quarter of the comm stream's CPU at stage 3 at 2 ranks and two fifths
  // at 4 (bench/README.md, "Stage 3's runtime threads" and "The
  // reduce-scatter at 3+ ranks"). One round instead of log2(W) + 1 also
  // leaves fewer waits on a peer that has no core. Arrival is gated and the
  // wait polled with the timeout, as the collective's was.
  absl::Status ExchangeReduceScatter(const float* send, float* recv,
                                     const std::vector<int64_t>& counts,
                                     const std::vector<int>& c, const std::vector<int>& d) {
    if (auto s = Gate("reduce-scatter"); !s.ok()) return s;
    const size_t mine = static_cast<size_t>(c[rank_]);
    const size_t need = mine * static_cast<size_t>(world_ - 1);
    if (exchange_scratch_.size() < need) exchange_scratch_.resize(need);
    // Peer q's piece lands in slot q (q < rank) or q - 1 (q > rank).
    std::vector<const float*> piece(world_);
    reqs_.assign(2 * static_cast<size_t>(world_ - 1), MPI_REQUEST_NULL);
    int rc = MPI_SUCCESS;
    for (int q = 0, k = 0; q < world_ && rc == MPI_SUCCESS; ++q) {
      if (q == rank_) {
        piece[q] = send + d[rank_];
        continue;
      }
      float* slot = exchange_scratch_.data() + static_cast<size_t>(q < rank_ ? q : q - 1) * mine;
      piece[q] = slot;
      rc = MPI_Irecv(slot, c[rank_], MPI_FLOAT, q, kExchangeTag, comm_, &reqs_[k++]);
      if (rc == MPI_SUCCESS) {
        rc = MPI_Isend(send + d[q], c[q], MPI_FLOAT, q, kExchangeTag, comm_, &reqs_[k++]);
      }
    }
    if (rc != MPI_SUCCESS) return Failed("reduce-scatter", rc);  // posted requests stay posted
    for (MPI_Request& r : reqs_) {
      if (r == MPI_REQUEST_NULL) continue;
      if (auto s = Wait(MPI_SUCCESS, &r, "reduce-scatter"); !s.ok()) return s;
    }
    TreeSumInto(piece, rank_, mine, recv);
    // A piece far larger than a bucket's (a large param reduced alone) is
    // not kept: the scratch would hold that memory for the run.
    if (exchange_scratch_.size() > (size_t{16} << 20)) std::vector<float>().swap(exchange_scratch_);
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank_), sizeof(float));
    return absl::OkStatus();
  }

  // Default mode, two ranks: the sum all-reduce on this thread as the
  // ring a 2-rank tuned MPI_Allreduce runs (bench/README.md, "Collectives on
  // the calling thread"): each rank receives the peer's copy of its half
  // into the pair scratch and adds it, then the summed halves are swapped.
  // Every element is one addition of the two ranks' values, computed once:
  // the bits of any 2-rank sum (addition commutes), without the hand-off
  // to the worker (3-8 us a call) or libnbc's slower all-reduce. Arrival is
  // gated with the first exchange (WaitArrivedAndDone).
  template <typename T>
  absl::Status PairAllReduce(T* data, int count, MPI_Datatype t) {
    const char* what = "all-reduce";
    if (broken_) return Broken(what);
    const auto deadline = Deadline();
    std::mutex* serial = SerialMutex();
    const int peer = 1 - rank_, half = count / 2;
    // Rank 0 owns [0, half), rank 1 [half, count).
    T* mine = data + (rank_ == 0 ? 0 : half);
    T* theirs = data + (rank_ == 0 ? half : 0);
    const int n_mine = rank_ == 0 ? half : count - half, n_theirs = count - n_mine;
    std::vector<T>& scratch = PairScratch<T>();
    if (scratch.size() < static_cast<size_t>(n_mine)) scratch.resize(n_mine);
    auto exchange = [&](MPI_Request* arrival, T* recv, int n_recv, const T* send, int n_send) {
      MPI_Request reqs[2];
      int rc;
      {
        std::unique_lock<std::mutex> l;
        if (serial != nullptr) l = std::unique_lock<std::mutex>(*serial);
        rc = MPI_Irecv(recv, n_recv, t, peer, kExchangeTag, comm_, &reqs[0]);
        if (rc == MPI_SUCCESS) rc = MPI_Isend(send, n_send, t, peer, kExchangeTag, comm_, &reqs[1]);
      }
      if (rc == MPI_SUCCESS) rc = WaitArrivedAndDone(arrival, 2, reqs, deadline, serial, wait_options_);
      return rc;
    };
    MPI_Request arrival = MPI_REQUEST_NULL;
    int rc = gate_ ? PostArrival(comm_, &arrival, serial) : MPI_SUCCESS;
    if (rc == MPI_SUCCESS) {
      rc = exchange(gate_ ? &arrival : nullptr, scratch.data(), n_mine, theirs, n_theirs);
    }
    if (rc == MPI_SUCCESS) {
      const T* other = scratch.data();
#pragma omp simd
      for (int i = 0; i < n_mine; ++i) mine[i] = mine[i] + other[i];
      rc = exchange(nullptr, theirs, n_theirs, mine, n_mine);
    }
    // A piece far larger than a bucket's is not kept (as ExchangeReduceScatter).
    if (scratch.size() > (size_t{16} << 20)) std::vector<T>().swap(scratch);
    if (rc == kArrivalTimedOut) return TimedOut(what);
    if (rc != MPI_SUCCESS) return Failed(what, rc);
    return absl::OkStatus();
  }

  template <typename T>
  std::vector<T>& PairScratch();

  // Direct mode's blocking reduce-scatter of equal pieces (see DirectPair).
  absl::Status DirectReduceScatter(const void* send, void* recv,
                                   const std::vector<int64_t>& counts, MPI_Datatype type,
                                   MPI_Op mop, size_t elem_bytes) {
    Job j{Job::kReduceScatterBlock};
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
    Job j{Job::kAllReduce};
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
    g_broken = true;
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
  absl::Status Blocking(const char* what, Job job) {
    if (broken_) return Broken(what);
    Worker();
    job.comm = comm_;
    const auto deadline = Deadline();
    job.gate = gate_;
    job.deadline = deadline;
    if (slot_) return Direct(what, job);
    if (OnCaller(job)) return Polled(what, job);
    int rc = MPI_SUCCESS;
    // With more ranks than cores the caller does not spin: its yields
    // take turns from the worker and the peers the job waits for (the
    // 4-rank all-reduce on 2 cores: 0.90 -> 0.95 of raw MPI at 64K
    // elements, bench/README.md, "Collectives on the calling thread").
    const bool spin = SmallJob(job) && !ranks_outnumber_cores_;
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
  static bool OnCaller(const Job& job) {
    return job.op == Job::kAllGather || job.op == Job::kAllGatherV || job.op == Job::kBcast;
  }

  // `job` (OnCaller) on this thread. A peer that never arrives, or stops
  // inside the collective, is a timeout: the request stays pending and the
  // communicator is broken, as with the worker's blocking call.
  absl::Status Polled(const char* what, const Job& j) {
    std::mutex* serial = SerialMutex();
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
      if (j.op == Job::kAllGather) {
        rc = MPI_Iallgather(j.send, j.count, j.type, j.recv, j.count, j.type, comm_, &req);
      } else if (j.op == Job::kAllGatherV) {
        rc = MPI_Iallgatherv(j.send, j.count, j.type, j.recv, worker_->counts.data(),
                             worker_->displs.data(), j.type, comm_, &req);
      } else if (j.op == Job::kBcast) {
        rc = MPI_Ibcast(j.recv, j.count, j.type, j.root, comm_, &req);
      }
    }
    if (rc != MPI_SUCCESS) return Failed(what, rc);
    ArrivalGateOptions options = wait_options_;
    if (options.transfer_max_sleep.count() > 0) {
      // Sleeps only past the time the transfer itself would take at ~4 GB/s
      // (raw MPI's 4-rank all-gather of 4M floats without single-copy here:
      // 5.8 GB/s), and at least 100 us: a fragmented transfer needs a test
      // per fragment (ArrivalGateOptions::transfer_spin).
      int type_bytes = 1;
      MPI_Type_size(j.type, &type_bytes);
      const int64_t bytes = static_cast<int64_t>(j.count) * type_bytes *
                            (j.op == Job::kBcast ? 1 : world_);
      options.transfer_spin = std::max(std::chrono::microseconds(100),
                                       std::chrono::microseconds(bytes / 4000));
    }
    rc = WaitArrivedAndDone(gate_ ? &arrival : nullptr, 1, &req, j.deadline, serial, options);
    if (rc == kArrivalTimedOut) return TimedOut(what);
    if (rc != MPI_SUCCESS) return Failed(what, rc);
    return absl::OkStatus();
  }

  // Whether `job` moves little enough (its whole result, this rank's
  // view) to end within the caller's spin: 256 KiB, about 100 us on
  // shared memory here (bench/README.md, "Collectives and the stage-1
  // boundary").
  bool SmallJob(const Job& job) const {
    int type_bytes = 1;
    MPI_Type_size(job.type, &type_bytes);
    const bool gather = job.op == Job::kAllGather || job.op == Job::kAllGatherV;
    const int64_t bytes =
        static_cast<int64_t>(job.count) * type_bytes * (gather ? world_ : 1);
    return bytes <= (int64_t{256} << 10);
  }

  // Direct mode: the blocking call on this thread, the watchdog armed. No
  // arrival gate: direct mode is raw MPI's speed and raw MPI's waiting
  // (the gate's barrier would cost 1-7 us per call, bench/README.md).
  absl::Status Direct(const char* what, const Job& job) {
    return DirectCall(what, [&] { return worker_->Execute(job); });
  }

  Clock::time_point Deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeout_seconds_));
  }

  // The arrival gate on the calling thread, before a non-blocking
  // collective is posted (default mode; none in direct mode): a peer that
  // never arrives is a timeout, and the wait sleeps instead of polling MPI.
  absl::Status Gate(const char* what) {
    if (broken_) return Broken(what);
    if (!gate_) return absl::OkStatus();
    const int rc = WaitForArrival(comm_, Deadline(), SerialMutex());
    if (rc == MPI_SUCCESS) return absl::OkStatus();
    return rc == kArrivalTimedOut ? TimedOut(what) : Failed(what, rc);
  }

  // An MPI call failed: this communicator is unusable from here on.
  absl::Status Failed(const char* what, int rc) {
    broken_ = true;
    g_broken = true;
    return absl::AbortedError(absl::StrCat("mpi communicator: ", what, " failed: ", MpiError(rc)));
  }

  // The deadline passed: this communicator is unusable from here on.
  absl::Status TimedOut(const char* what) {
    broken_ = true;
    g_broken = true;
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
    if (g_serialize.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> serial(g_serial_mu);
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
      if (backoff && wait_options_.transfer_max_sleep.count() > 0) {
        // More ranks than cores: a late peer has no core, and 5 us sleeps
        // (each ~55 us with the default timer slack, plus a test) cost a
        // quarter of the wait in CPU; doubling to the cap costs a few %.
        std::this_thread::sleep_for(std::min<std::chrono::microseconds>(
            std::chrono::microseconds(int64_t{5} << std::min(spins, 5u)),
            wait_options_.transfer_max_sleep));
      } else if (backoff) {
        std::this_thread::sleep_for(std::chrono::microseconds(spins > 4096 ? 100 : 5));
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
    if (!worker_) worker_ = BlockingWorker::Make();
    return *worker_;
  }

  std::shared_ptr<BlockingWorker> worker_;  // made by the first collective
  // ExchangeReduceScatter's receive buffer (W - 1 pieces), its requests
  // and its tag, on this communicator (a duplicate only collectives use: no
  // other point-to-point traffic); PairAllReduce takes the same buffer and
  // tag (for doubles a buffer of its own).
  std::vector<float> exchange_scratch_;
  std::vector<double> pair_scratch_f64_;
  std::vector<MPI_Request> reqs_;
  static constexpr int kExchangeTag = 7301;
  std::shared_ptr<WatchSlot> slot_;  // direct mode only
};

template <>
std::vector<float>& MpiCommunicator::PairScratch<float>() {
  return exchange_scratch_;
}
template <>
std::vector<double>& MpiCommunicator::PairScratch<double>() {
  return pair_scratch_f64_;
}

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
