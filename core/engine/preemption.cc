#include "core/engine/preemption.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace zero {
namespace {

// Set by the handler (a lock-free atomic store is async-signal-safe);
// `g_watched` is the signal an engine watches (0: none).
std::atomic<int> g_received{0};
std::atomic<int> g_watched{0};

extern "C" void OnPreemptSignal(int sig) { g_received.store(sig); }

}  // namespace

absl::StatusOr<std::unique_ptr<Preemption>> Preemption::Install(EngineContext* ctx,
                                                                const PreemptionOptions& o,
                                                                SaveFn save) {
  if (o.dir.empty()) {
    return absl::InvalidArgumentError("set_preemption: dir (where to save) is empty");
  }
  if (o.signal <= 0 || o.signal >= NSIG || o.signal == SIGKILL || o.signal == SIGSTOP) {
    return absl::InvalidArgumentError(
        absl::StrCat("set_preemption: signal ", o.signal, " cannot be caught"));
  }
  int none = 0;
  if (!g_watched.compare_exchange_strong(none, o.signal)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "set_preemption: another engine of this process watches signal ", none,
        "; one engine at a time"));
  }
  std::unique_ptr<Preemption> p(new Preemption(ctx, o, std::move(save)));
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnPreemptSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  g_received.store(0);
  if (sigaction(o.signal, &sa, &p->previous_) != 0) {
    g_watched.store(0);
    return absl::InternalError(absl::StrCat("set_preemption: sigaction(", o.signal,
                                            "): ", std::strerror(errno)));
  }
  return p;
}

Preemption::~Preemption() {
  sigaction(options_.signal, &previous_, nullptr);
  g_watched.store(0);
}

absl::Status Preemption::AtBoundary(int64_t global_step) {
  const int world = ctx_->world, rank = ctx_->rank;
  // Lowest signalled rank, as max of (world - rank); 0: none.
  double flag = g_received.load() == options_.signal ? static_cast<double>(world - rank) : 0.0;
  if (world > 1) {
    Communicator* ctrl = ctx_->ctrl;
    const absl::Status s = ctx_->stream->Wait(ctx_->stream->Submit([&] {
      ScopedCountingKind k(ctrl, CollectiveKind::kControl);
      return ctrl->AllReduce(&flag, 1, ReduceOp::kMax);
    }));
    if (!s.ok()) return ctx_->Fail(s);
  }
  if (flag == 0.0) return absl::OkStatus();
  const int first = world - static_cast<int>(flag);
  const std::string tag =
      options_.tag.empty() ? absl::StrCat("global_step", global_step) : options_.tag;
  const absl::Status saved = save_(options_.dir, tag);
  const int code = options_.exit_code != 0 ? options_.exit_code : 128 + options_.signal;
  std::string msg = absl::StrCat(
      "preempted: ", strsignal(options_.signal), " reached rank ", first, "; every rank finished global step ",
      global_step, " and ",
      saved.ok() ? absl::StrCat("saved '", options_.dir, "/", tag, "'")
                 : absl::StrCat("the save failed: ", saved.message()));
  if (options_.exit) {
    std::fprintf(stderr, "zero: rank %d: %s; exiting with code %d\n", rank, msg.c_str(), code);
    std::fflush(stderr);
    std::fflush(stdout);
    // Every rank has said it before any leaves (a launcher ends the job
    // when the first rank exits). _Exit: the engine's threads are still
    // running, so no destructors; the checkpoint is already fsynced.
    if (world > 1) {
      (void)ctx_->stream->Wait(ctx_->stream->Submit([&] { return ctx_->ctrl->Barrier(); }));
    }
    std::_Exit(code);
  }
  return absl::CancelledError(msg);
}

}  // namespace zero
