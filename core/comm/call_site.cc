#include "core/comm/call_site.h"

namespace zero {

const char* ApiCallName(int64_t call) {
  static const char* const kNames[] = {
      "(no engine call)", "finalize",      "gather", "gather_into",      "release",
      "grad_buffer",      "grad_ready",    "step",   "read_master",      "save_checkpoint",
      "load_checkpoint",  "load_safetensors"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<int>(ApiCall::kCount),
                "one name per ApiCall");
  if (call < 0 || call >= static_cast<int64_t>(ApiCall::kCount)) return "?";
  return kNames[call];
}

CallSite& CurrentCallSite() {
  thread_local CallSite site;
  return site;
}

ScopedCallSite::ScopedCallSite(ApiCall call, int64_t step, int64_t micro)
    : saved_(CurrentCallSite()) {
  CallSite& s = CurrentCallSite();
  if (s.call != ApiCall::kNone) return;
  s = CallSite{};
  s.call = call;
  s.step = step;
  s.micro = micro;
}

ScopedCollectiveSubject::ScopedCollectiveSubject(const std::vector<int>& ids, int64_t bucket)
    : saved_(CurrentCallSite()) {
  CallSite& s = CurrentCallSite();
  s.param = ids.empty() ? -1 : ids[0];
  s.nparams = static_cast<int64_t>(ids.size());
  // FNV-1a over the ids in order: a bucket of other params (a module skipped
  // on one rank) differs even when its size matches.
  uint64_t h = 1469598103934665603ull;
  for (int id : ids) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(id));
    h *= 1099511628211ull;
  }
  s.ids_hash = ids.empty() ? 0 : h;
  s.bucket = bucket;
}

}  // namespace zero
