#include "core/comm/flight_recorder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/dtype.h"

namespace zero {

const char* CollectiveOutcomeName(CollectiveOutcome o) {
  switch (o) {
    case CollectiveOutcome::kPending: return "pending";
    case CollectiveOutcome::kDone: return "done";
    case CollectiveOutcome::kFailed: return "failed";
    case CollectiveOutcome::kDiverged: return "diverged";
    case CollectiveOutcome::kTimedOut: return "timed_out";
    case CollectiveOutcome::kDeferred: return "deferred";
  }
  return "?";
}

int64_t FlightRecorder::Start(const CollectiveSignature& s) {
  std::lock_guard<std::mutex> l(mu_);
  if (capacity_ <= 0) return -1;
  if (static_cast<int>(entries_.size()) == capacity_) {
    entries_.pop_front();
    ++first_index_;
  }
  entries_.push_back({s, CollectiveOutcome::kPending});
  return first_index_ + static_cast<int64_t>(entries_.size()) - 1;
}

void FlightRecorder::Finish(int64_t index, CollectiveOutcome outcome) {
  std::lock_guard<std::mutex> l(mu_);
  if (index < first_index_) return;  // fell out of the window meanwhile
  const int64_t k = index - first_index_;
  if (k < static_cast<int64_t>(entries_.size())) entries_[k].outcome = outcome;
}

namespace {

// JSON string contents: param names are the caller's, so quotes,
// backslashes and control characters are escaped.
std::string Escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, "\\u00", c < 0x10 ? "0" : "", absl::Hex(c));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string FlightRecorder::JsonLines(const ParamNamer& name) const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  for (const Entry& e : entries_) {
    const CollectiveSignature& s = e.sig;
    const std::string param = s.param >= 0 && name ? name(s.param) : "";
    absl::StrAppend(
        &out, "{\"rank\":", rank_, ",\"comm\":", s.comm, ",\"seq\":", s.seq, ",\"op\":\"",
        SignedOpName(s.op), "\",\"elems\":", s.elems, ",\"dtype\":\"",
        s.dtype >= 0 && s.dtype <= 2 ? DTypeName(static_cast<DType>(s.dtype)) : "",
        "\",\"call\":\"", ApiCallName(s.call), "\",\"step\":", s.step, ",\"micro_step\":",
        s.micro, ",\"param\":\"", Escaped(param), "\",\"params\":", s.nparams,
        ",\"bucket\":", s.bucket, ",\"outcome\":\"", CollectiveOutcomeName(e.outcome),
        "\"}\n");
  }
  return out;
}

std::string FlightRecorder::Text(const ParamNamer& name, int max_lines) const {
  std::lock_guard<std::mutex> l(mu_);
  const int n = static_cast<int>(entries_.size());
  const int shown = std::min(n, std::max(0, max_lines));
  std::string out = absl::StrCat("[zero] rank ", rank_, " flight recorder: the last ", shown,
                                 " of ", n, " collectives kept",
                                 n > shown ? " (all of them: zero_engine_flight_record)" : "",
                                 "\n");
  for (int k = n - shown; k < n; ++k) {
    const Entry& e = entries_[k];
    absl::StrAppend(&out, "[zero] rank ", rank_, "   #", e.sig.seq,
                    e.sig.comm != 0 ? absl::StrCat(" (comm ", e.sig.comm, ")") : "", " ",
                    DescribeCollective(e.sig, name), ": ", CollectiveOutcomeName(e.outcome),
                    "\n");
  }
  return out;
}

}  // namespace zero
