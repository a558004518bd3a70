// One mapping from a system call's errno to an absl::Status, for every file
// and IO path of the core (checkpoints, the NVMe tier, the param files, the
// async IO engine). The message is "what: strerror(err)", so callers put the
// operation and the path in `what` ("write to '/x/y' at offset 4096 failed").
//
//   ENOENT                          NotFound            (ZERO_NOT_FOUND)
//   EACCES EPERM EROFS              PermissionDenied    (ZERO_IO_ERROR)
//   ENOSPC EDQUOT EFBIG ENOMEM      ResourceExhausted   (ZERO_OUT_OF_MEMORY)
//   EEXIST                          AlreadyExists       (ZERO_IO_ERROR)
//   EINVAL                          InvalidArgument     (ZERO_INVALID_ARGUMENT)
//   ENOTDIR EISDIR ENOTEMPTY        FailedPrecondition  (ZERO_FAILED_PRECONDITION)
//   anything else (EIO, EBADF, ...) Unavailable         (ZERO_IO_ERROR)
//
// Failures that are no errno (a short read of a truncated file, a write that
// makes no progress) are the caller's to classify (DataLoss, ...).
#ifndef ZERO_CORE_COMMON_ERRNO_STATUS_H_
#define ZERO_CORE_COMMON_ERRNO_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace zero {

absl::StatusCode ErrnoToStatusCode(int err);

// strerror(err), thread-safe.
std::string ErrnoText(int err);

// "what: strerror(err)" with the code of ErrnoToStatusCode(err).
absl::Status ErrnoToStatus(int err, absl::string_view what);

}  // namespace zero

#endif  // ZERO_CORE_COMMON_ERRNO_STATUS_H_
