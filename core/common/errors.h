// Typed statuses the C ABI maps to codes of their own. A payload, not the
// message text, says what the error is, so messages can change freely.
#ifndef ZERO_CORE_COMMON_ERRORS_H_
#define ZERO_CORE_COMMON_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace zero {

// The payload type URL that marks a mismatch between ranks.
inline constexpr char kMismatchPayloadUrl[] = "zero.dev/mismatch";

// Ranks disagree (registered params, config): FailedPrecondition carrying
// the mismatch payload; the C ABI reports it as ZERO_MISMATCH.
inline absl::Status MismatchError(absl::string_view message) {
  absl::Status s(absl::StatusCode::kFailedPrecondition, message);
  s.SetPayload(kMismatchPayloadUrl, absl::Cord("1"));
  return s;
}

// True for a status made by MismatchError (whatever its message).
inline bool IsMismatch(const absl::Status& s) {
  return !s.ok() && s.GetPayload(kMismatchPayloadUrl).has_value();
}

}  // namespace zero

#endif  // ZERO_CORE_COMMON_ERRORS_H_
