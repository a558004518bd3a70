// absl::Status -> zero_status: the one mapping of the C ABI. Internal to
// libzero_c.
#ifndef ZERO_CAPI_STATUS_CODE_H_
#define ZERO_CAPI_STATUS_CODE_H_

#include "absl/status/status.h"
#include "zero_c.h"

namespace zero_capi {

// By the status's code; a status made by zero::MismatchError (a payload, not
// the message) is ZERO_MISMATCH.
zero_status ToZeroStatus(const absl::Status& s);

}  // namespace zero_capi

#endif  // ZERO_CAPI_STATUS_CODE_H_
