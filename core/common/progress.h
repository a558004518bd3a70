// Progress of long work (docs/ARCHITECTURE.md, "Progress"): checkpoint
// save, load, export and reshard, and the NVMe tier's preallocation and
// first write report bytes done and in total on this rank; the callback
// returns false to cancel, and the work then fails with Cancelled.
#ifndef ZERO_CORE_COMMON_PROGRESS_H_
#define ZERO_CORE_COMMON_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <utility>

namespace zero {

// `what` names the work ("save", "load", "export", "reshard",
// "nvme preallocate", "nvme initialize"); `done` rises to `total`.
using ProgressCallback = std::function<bool(const char* what, int64_t done, int64_t total)>;

// The (done, total) callback of one kind of work (ckpt::ProgressFn); empty
// when `cb` is.
inline std::function<bool(int64_t, int64_t)> ProgressFor(ProgressCallback cb, const char* what) {
  if (!cb) return nullptr;
  return [cb = std::move(cb), what](int64_t done, int64_t total) { return cb(what, done, total); };
}

}  // namespace zero

#endif  // ZERO_CORE_COMMON_PROGRESS_H_
