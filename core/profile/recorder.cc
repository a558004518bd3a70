#include "core/profile/recorder.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace zero {
namespace {

constexpr const char* kPhaseNames[] = {
    "forward", "backward", "step", "reduce", "reduce_exposed", "reduce_drain", "gather", "gather_exposed",
    "boundary_reduce", "norm", "update", "publish", "nvme_read", "nvme_write", "nvme_busy",
    "nvme_exposed", "collective"};
static_assert(sizeof(kPhaseNames) / sizeof(kPhaseNames[0]) ==
              static_cast<size_t>(Phase::kCount));

double Ms(Recorder::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out;
}

std::string TraceFileFor(const std::string& path, int rank) {
  if (path.empty()) return "";
  if (path.find("{rank}") != std::string::npos) {
    return absl::StrReplaceAll(path, {{"{rank}", absl::StrCat(rank)}});
  }
  const size_t dot = path.rfind('.');
  const size_t slash = path.rfind('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
    return absl::StrCat(path.substr(0, dot), ".rank", rank, path.substr(dot));
  }
  return absl::StrCat(path, ".rank", rank, ".json");
}

}  // namespace

const char* PhaseName(Phase p) { return kPhaseNames[static_cast<int>(p)]; }

double StepBreakdown::reduce_hidden_ms() const {
  const double h = at(Phase::kReduce) - at(Phase::kReduceExposed) - at(Phase::kReduceDrain);
  return h > 0 ? h : 0;
}

double StepBreakdown::gather_hidden_ms() const {
  const double h = at(Phase::kGather) - at(Phase::kGatherExposed);
  return h > 0 ? h : 0;
}

double StepBreakdown::nvme_hidden_ms() const {
  const double h = at(Phase::kNvmeBusy) - at(Phase::kNvmeExposed);
  return h > 0 ? h : 0;
}

Recorder::Recorder(int rank, bool breakdown, TraceOptions trace)
    : rank_(rank),
      breakdown_(breakdown),
      trace_(std::move(trace)),
      trace_file_(TraceFileFor(trace_.path, rank)),
      origin_(Clock::now()) {
  if (!trace_file_.empty() && trace_.start_step <= 0 && trace_.end_step > 0) tracing_ = true;
  NameThisThread("caller");
}

Recorder::~Recorder() { (void)FlushTrace(); }

int Recorder::ThreadId() {
  // Under mu_.
  auto [it, fresh] = tids_.emplace(std::this_thread::get_id(), static_cast<int>(tids_.size()));
  if (fresh && !thread_names_.count(it->second)) {
    thread_names_[it->second] = it->second == 0 ? "caller" : absl::StrCat("comm stream ", it->second);
  }
  return it->second;
}

void Recorder::NameThisThread(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  thread_names_[ThreadId()] = name;
}

void Recorder::Add(Phase p, Clock::time_point t0, Clock::time_point t1, const char* label,
                   const std::string& detail) {
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  if (p != Phase::kCollective) acc_ns_[static_cast<int>(p)].fetch_add(ns, std::memory_order_relaxed);
  // kNvmeBusy is the union of the read and write spans already traced.
  if (p == Phase::kNvmeBusy || !tracing_.load(std::memory_order_relaxed)) return;
  const int64_t ts = std::chrono::duration_cast<std::chrono::nanoseconds>(t0 - origin_).count();
  std::lock_guard<std::mutex> l(mu_);
  events_.push_back({static_cast<int>(p), label, detail, ThreadId(), ts, ns});
}

void Recorder::OnCall(bool grad_ready) {
  const Clock::time_point now = Clock::now();
  if (!step_begun_) {
    step_begun_ = true;
    step_begin_ = now;
  }
  if (state_ == State::kIdle) {
    state_ = State::kForward;
    mark_ = now;
  }
  if (grad_ready && state_ == State::kForward) {
    Add(Phase::kForward, mark_, now);
    state_ = State::kBackward;
    mark_ = now;
  }
}

void Recorder::OnStepEnter() {
  const Clock::time_point now = Clock::now();
  if (!step_begun_) {
    step_begun_ = true;
    step_begin_ = now;
  }
  if (state_ == State::kForward) Add(Phase::kForward, mark_, now);
  if (state_ == State::kBackward) Add(Phase::kBackward, mark_, now);
  state_ = State::kIdle;
  step_enter_ = now;
}

bool Recorder::OnStepExit(bool boundary, int64_t steps_after, int64_t nvme_read_total,
                          int64_t nvme_write_total) {
  const Clock::time_point now = Clock::now();
  Add(Phase::kStep, step_enter_, now);
  ++micro_;
  if (!boundary) return false;
  StepBreakdown b;
  b.global_step = steps_after;
  b.micro_steps = micro_;
  b.step_ms = Ms(now - step_begin_);
  for (int k = 0; k < static_cast<int>(Phase::kCount); ++k) {
    b.ms[k] = static_cast<double>(acc_ns_[k].exchange(0)) / 1e6;
  }
  b.nvme_read_bytes = nvme_read_total - nvme_read_prev_;
  b.nvme_write_bytes = nvme_write_total - nvme_write_prev_;
  nvme_read_prev_ = nvme_read_total;
  nvme_write_prev_ = nvme_write_total;
  last_ = b;
  micro_ = 0;
  step_begun_ = false;
  if (!trace_file_.empty() && !trace_done_) {
    if (steps_after >= trace_.end_step) {
      tracing_ = false;
      (void)FlushTrace();
    } else if (steps_after >= trace_.start_step) {
      tracing_ = true;
    }
  }
  return true;
}

std::string Recorder::FormatLast() const {
  const StepBreakdown& b = last_;
  auto ms = [&](Phase p) { return b.at(p); };
  // DeepSpeed's timers line (engine.py, wall_clock_breakdown): backward is
  // the caller's backward plus the wait for the last reductions in step();
  // bwd_allreduce the reduction time the caller saw.
  const double allreduce = ms(Phase::kReduceExposed) + ms(Phase::kReduceDrain);
  const double bwd = ms(Phase::kBackward) + ms(Phase::kReduceDrain);
  std::string s = absl::StrFormat(
      "[Rank %d] time (ms) | fwd: %.2f | bwd: %.2f | bwd_inner: %.2f | bwd_allreduce: %.2f | "
      "step: %.2f\n",
      rank_, ms(Phase::kForward), bwd, bwd - allreduce, allreduce,
      ms(Phase::kStep) - ms(Phase::kReduceDrain));
  absl::StrAppendFormat(
      &s,
      "[Rank %d] zero step %d (%d micro-steps, %.2f ms) | reduce: %.2f (hidden %.2f) | "
      "gather: %.2f (hidden %.2f) | boundary_reduce: %.2f | norm: %.2f | update: %.2f | "
      "publish: %.2f | nvme read/write: %.1f/%.1f MB in %.2f/%.2f ms (exposed %.2f, hidden "
      "%.2f)\n",
      rank_, b.global_step, b.micro_steps, b.step_ms, ms(Phase::kReduce),
      b.reduce_hidden_ms(), ms(Phase::kGather), b.gather_hidden_ms(), ms(Phase::kBoundaryReduce),
      ms(Phase::kNorm), ms(Phase::kUpdate), ms(Phase::kPublish), b.nvme_read_bytes / 1e6,
      b.nvme_write_bytes / 1e6, ms(Phase::kNvmeRead), ms(Phase::kNvmeWrite),
      ms(Phase::kNvmeExposed), b.nvme_hidden_ms());
  return s;
}

absl::Status Recorder::FlushTrace() {
  std::lock_guard<std::mutex> l(mu_);
  if (trace_file_.empty() || trace_done_) return absl::OkStatus();
  trace_done_ = true;
  tracing_ = false;
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  absl::StrAppendFormat(&out,
                        "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
                        "\"args\": {\"name\": \"rank %d\"}}",
                        rank_, rank_);
  for (const auto& [tid, name] : thread_names_) {
    absl::StrAppendFormat(&out,
                          ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                          "\"args\": {\"name\": \"%s\"}}",
                          rank_, tid, JsonEscape(name));
  }
  for (const Event& e : events_) {
    const char* cat = kPhaseNames[e.phase];
    absl::StrAppendFormat(&out,
                          ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, "
                          "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f",
                          JsonEscape(e.label ? e.label : cat), cat, rank_, e.tid,
                          e.ts_ns / 1e3, e.dur_ns / 1e3);
    if (!e.detail.empty()) {
      absl::StrAppendFormat(&out, ", \"args\": {\"detail\": \"%s\"}", JsonEscape(e.detail));
    }
    out += "}";
  }
  out += "\n]}\n";
  events_.clear();
  std::FILE* f = std::fopen(trace_file_.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "[zero] rank %d: cannot write zero_trace '%s'\n", rank_,
                 trace_file_.c_str());
    return absl::NotFoundError(absl::StrCat("zero_trace.path: cannot write '", trace_file_, "'"));
  }
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok) {
    return absl::DataLossError(absl::StrCat("zero_trace.path: short write to '", trace_file_, "'"));
  }
  return absl::OkStatus();
}

}  // namespace zero
