#include "core/common/errno_status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace zero {

absl::StatusCode ErrnoToStatusCode(int err) {
  switch (err) {
    case ENOENT:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case ENOMEM:
      return absl::StatusCode::kResourceExhausted;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EINVAL:
      return absl::StatusCode::kInvalidArgument;
    case ENOTDIR:
    case EISDIR:
    case ENOTEMPTY:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kUnavailable;
  }
}

std::string ErrnoText(int err) {
  // strerror may share a buffer between threads; the GNU strerror_r does not.
  char buf[256];
  return ::strerror_r(err, buf, sizeof(buf));
}

absl::Status ErrnoToStatus(int err, absl::string_view what) {
  return absl::Status(ErrnoToStatusCode(err), absl::StrCat(what, ": ", ErrnoText(err)));
}

}  // namespace zero
