// Typed errors the C ABI maps to their own status codes, without matching
// message text.
#ifndef ZERO_CORE_COMMON_ERRORS_H_
#define ZERO_CORE_COMMON_ERRORS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace zero {

// The payload URL that marks a disagreement between ranks.
inline constexpr absl::string_view kMismatchPayload = "zero.dev/mismatch";

// Ranks disagree (registered params, checkpoint agreement): ZERO_MISMATCH.
inline absl::Status MismatchError(absl::string_view msg) {
  absl::Status s(absl::StatusCode::kFailedPrecondition, msg);
  s.SetPayload(kMismatchPayload, absl::Cord("1"));
  return s;
}

inline bool IsMismatch(const absl::Status& s) {
  return s.GetPayload(kMismatchPayload).has_value();
}

}  // namespace zero

#endif  // ZERO_CORE_COMMON_ERRORS_H_
