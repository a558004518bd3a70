#include "capi/status_code.h"

#include "core/common/errors.h"

namespace zero_capi {

zero_status ToZeroStatus(const absl::Status& s) {
  if (zero::IsMismatch(s)) return ZERO_MISMATCH;
  switch (s.code()) {
    case absl::StatusCode::kOk: return ZERO_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange: return ZERO_INVALID_ARGUMENT;
    case absl::StatusCode::kFailedPrecondition: return ZERO_FAILED_PRECONDITION;
    case absl::StatusCode::kNotFound: return ZERO_NOT_FOUND;
    case absl::StatusCode::kResourceExhausted: return ZERO_OUT_OF_MEMORY;
    case absl::StatusCode::kDeadlineExceeded: return ZERO_TIMEOUT;
    case absl::StatusCode::kDataLoss: return ZERO_DATA_LOSS;
    case absl::StatusCode::kUnimplemented: return ZERO_UNIMPLEMENTED;
    case absl::StatusCode::kAborted: return ZERO_ABORTED;
    case absl::StatusCode::kCancelled: return ZERO_CANCELLED;
    // File system failures (core/common/errno_status.h).
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kAlreadyExists: return ZERO_IO_ERROR;
    default: return ZERO_INTERNAL;
  }
}

}  // namespace zero_capi
