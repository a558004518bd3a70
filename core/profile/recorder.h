// Where the time goes (docs/ARCHITECTURE.md, "Observing a run"): the
// per-step breakdown (wall_clock_breakdown) and the timeline trace
// (zero_trace). The engine front marks the caller's phases (forward from the
// first gather or grad_buffer to the first grad_ready, backward from there to
// step(), the step itself); the parts time their work with ScopedPhase, on
// whatever thread runs it, which also becomes a span of the trace. A null
// Recorder costs one branch per scope.
#ifndef ZERO_CORE_PROFILE_RECORDER_H_
#define ZERO_CORE_PROFILE_RECORDER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace zero {

enum class Phase : int {
  kForward = 0,      // caller: first gather/grad_buffer .. first grad_ready
  kBackward,         // caller: first grad_ready .. step()
  kStep,             // caller: inside step()
  kReduce,           // gradient bucket reductions, any thread
  kReduceExposed,    // caller inside grad_buffer/grad_ready (waiting for or running reductions)
  kReduceDrain,      // caller in step() waiting for the micro-step's last reductions
  kGather,           // stage-3 gathers and prefetches, any thread
  kGatherExposed,    // caller inside gather
  kBoundaryReduce,   // step: stage 0 leftovers, stage 1 flat reduce-scatter
  kNorm,             // step: fp32 cast, sum of squares, norm all-reduce
  kUpdate,           // step: unscale+clip (one factor), optimizer, cast to the working copy
  kPublish,          // step: all-gather of the updated working copy
  kNvmeRead,         // NVMe reads outstanding (submitted, not complete; overlaps once)
  kNvmeWrite,        // NVMe writes outstanding
  kNvmeBusy,         // reads or writes outstanding (breakdown only, no trace span)
  kNvmeExposed,      // a thread waiting for NVMe IO (Aio::Wait)
  kCollective,       // one collective call (comms_logger), trace only
  kCount
};

const char* PhaseName(Phase p);

// One optimizer step, in milliseconds (zero_step_breakdown).
struct StepBreakdown {
  int64_t global_step = 0;   // optimizer steps taken, skipped ones included, after it
  int micro_steps = 0;
  double step_ms = 0;        // first call of the first micro-step .. the boundary's return
  double ms[static_cast<int>(Phase::kCount)] = {};
  int64_t nvme_read_bytes = 0, nvme_write_bytes = 0;
  double at(Phase p) const { return ms[static_cast<int>(p)]; }
  // Reduction time not spent by the caller (overlapped with its compute).
  double reduce_hidden_ms() const;
  double gather_hidden_ms() const;
  // NVMe busy time nobody waited for (overlapped with the update's compute).
  double nvme_hidden_ms() const;
};

struct TraceOptions {
  std::string path;          // empty: no trace
  int64_t start_step = 0;    // first optimizer step traced (steps counted from 0)
  int64_t end_step = 1;      // first step not traced
};

class Recorder {
 public:
  using Clock = std::chrono::steady_clock;

  Recorder(int rank, bool breakdown, TraceOptions trace);
  ~Recorder();

  bool breakdown() const { return breakdown_; }
  bool tracing() const { return tracing_.load(std::memory_order_relaxed); }

  // Any thread: `p` ran from t0 to t1 (`label` names the trace span).
  void Add(Phase p, Clock::time_point t0, Clock::time_point t1, const char* label = nullptr,
           const std::string& detail = {});
  void NameThisThread(const std::string& name);

  // The engine front (caller's thread).
  void OnCall(bool grad_ready);
  void OnStepEnter();
  // Returns true when a breakdown was completed (boundary).
  bool OnStepExit(bool boundary, int64_t steps_after, int64_t nvme_read_total,
                  int64_t nvme_write_total);
  const StepBreakdown& last() const { return last_; }
  // DeepSpeed's line and zero's, for steps_per_print.
  std::string FormatLast() const;
  // Writes the trace now (also done when end_step is reached and at destruction).
  absl::Status FlushTrace();
  const std::string& trace_file() const { return trace_file_; }

 private:
  struct Event {
    int phase;
    const char* label;
    std::string detail;
    int tid;
    int64_t ts_ns, dur_ns;
  };
  int ThreadId();

  const int rank_;
  const bool breakdown_;
  const TraceOptions trace_;
  std::string trace_file_;
  const Clock::time_point origin_;
  std::atomic<int64_t> acc_ns_[static_cast<int>(Phase::kCount)] = {};
  // Caller-side tiling.
  enum class State { kIdle, kForward, kBackward };
  State state_ = State::kIdle;
  Clock::time_point mark_, step_begin_, step_enter_;
  bool step_begun_ = false;
  int micro_ = 0;
  int64_t nvme_read_prev_ = 0, nvme_write_prev_ = 0;
  StepBreakdown last_;
  // Trace.
  std::atomic<bool> tracing_{false};
  bool trace_done_ = false;
  std::mutex mu_;
  std::vector<Event> events_;
  std::map<std::thread::id, int> tids_;
  std::map<int, std::string> thread_names_;
};

// Times a scope as phase `p` (nothing when `r` is null).
class ScopedPhase {
 public:
  ScopedPhase(Recorder* r, Phase p, const char* label = nullptr)
      : r_(r), p_(p), label_(label) {
    if (r_) t0_ = Recorder::Clock::now();
  }
  ~ScopedPhase() {
    if (r_) r_->Add(p_, t0_, Recorder::Clock::now(), label_);
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  Recorder* r_;
  Phase p_;
  const char* label_;
  Recorder::Clock::time_point t0_;
};

// A comm-stream task timed as phase `p` where it runs.
inline std::function<absl::Status()> Timed(Recorder* r, Phase p,
                                           std::function<absl::Status()> task,
                                           const char* label = nullptr) {
  if (r == nullptr) return task;
  return [r, p, label, task = std::move(task)] {
    ScopedPhase s(r, p, label);
    return task();
  };
}

}  // namespace zero

#endif  // ZERO_CORE_PROFILE_RECORDER_H_
