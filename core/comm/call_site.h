// Which engine call a collective serves (docs/ARCHITECTURE.md, "When ranks
// disagree"): the API call, the step and micro-step it was made at, and the
// params or gradient bucket it moves. Kept per thread: the engine sets it
// when a call enters (ScopedCallSite), the comm stream carries the
// submitter's to the task it runs (a bucket reduced on the stream thread is
// filed under the grad_ready that filled it, not under whatever the caller
// does meanwhile), and the reducer and the stage-3 coordinator add the
// params (ScopedCollectiveSubject). The checked communicator puts it in each
// collective's signature.
#ifndef ZERO_CORE_COMM_CALL_SITE_H_
#define ZERO_CORE_COMM_CALL_SITE_H_

#include <cstdint>
#include <vector>

namespace zero {

// The engine calls that may issue collectives. Fixed values: ranks compare
// them as numbers.
enum class ApiCall : int32_t {
  kNone = 0,
  kFinalize = 1,
  kGather = 2,
  kGatherInto = 3,
  kRelease = 4,
  kGradBuffer = 5,
  kGradReady = 6,
  kStep = 7,
  kReadMaster = 8,
  kSave = 9,
  kLoad = 10,
  kLoadSafetensors = 11,
  kCount = 12
};

// The name a user knows the call by ("step", "save"); "?" out of range.
const char* ApiCallName(int64_t call);

struct CallSite {
  ApiCall call = ApiCall::kNone;
  int64_t step = -1;   // optimizer steps taken when the call was made
  int64_t micro = -1;  // micro-step within the accumulation
  // What the collective moves: the first param's layout index (trainable
  // params, in registration order), how many params, a hash of all their
  // indices (-1, 0, 0: none named); the gradient bucket's number within the
  // micro-step (-1: not a bucket).
  int64_t param = -1;
  int64_t nparams = 0;
  uint64_t ids_hash = 0;
  int64_t bucket = -1;
  // A gradient bucket reduction (or the reducer's end-of-micro-step marker)
  // that may be deferred: when every rank's collective is such a one at the
  // same step and micro-step, a difference is not an error but
  // BucketDivergence (ignore_unused_parameters, docs/ARCHITECTURE.md, "When
  // ranks disagree").
  bool deferrable = false;
};

// This thread's call site.
CallSite& CurrentCallSite();

// Marks this thread's collectives deferrable for the scope.
class ScopedDeferrable {
 public:
  ScopedDeferrable() : saved_(CurrentCallSite().deferrable) {
    CurrentCallSite().deferrable = true;
  }
  ~ScopedDeferrable() { CurrentCallSite().deferrable = saved_; }
  ScopedDeferrable(const ScopedDeferrable&) = delete;
  ScopedDeferrable& operator=(const ScopedDeferrable&) = delete;

 private:
  bool saved_;
};

// Sets this thread's call (and step, micro-step) for the scope; an inner
// scope (an engine call made by another one, e.g. read_master inside a
// state gather) keeps the outer call.
class ScopedCallSite {
 public:
  ScopedCallSite(ApiCall call, int64_t step, int64_t micro);
  ~ScopedCallSite() { CurrentCallSite() = saved_; }
  ScopedCallSite(const ScopedCallSite&) = delete;
  ScopedCallSite& operator=(const ScopedCallSite&) = delete;

 private:
  CallSite saved_;
};

// Installs a whole call site for the scope (the comm stream's tasks).
class ScopedCallSiteRestore {
 public:
  explicit ScopedCallSiteRestore(const CallSite& site)
      : saved_(CurrentCallSite()) { CurrentCallSite() = site; }
  ~ScopedCallSiteRestore() { CurrentCallSite() = saved_; }
  ScopedCallSiteRestore(const ScopedCallSiteRestore&) = delete;
  ScopedCallSiteRestore& operator=(const ScopedCallSiteRestore&) = delete;

 private:
  CallSite saved_;
};

// Names the params (layout indices) a collective moves, and its bucket
// number (-1: none), for the scope.
class ScopedCollectiveSubject {
 public:
  ScopedCollectiveSubject(const std::vector<int>& ids, int64_t bucket);
  explicit ScopedCollectiveSubject(int id) : ScopedCollectiveSubject(std::vector<int>{id}, -1) {}
  ~ScopedCollectiveSubject() { CurrentCallSite() = saved_; }
  ScopedCollectiveSubject(const ScopedCollectiveSubject&) = delete;
  ScopedCollectiveSubject& operator=(const ScopedCollectiveSubject&) = delete;

 private:
  CallSite saved_;
};

}  // namespace zero

#endif  // ZERO_CORE_COMM_CALL_SITE_H_
