// Durable file operations for checkpoints: whole-file writes that land
// atomically (temporary name, fsync, rename, fsync of the directory), a tag
// directory swapped into place in one step, and reads that name the file in
// every error. A failed system call becomes the status of its errno by the
// one mapping of core/common/errno_status.h (a missing file is NotFound,
// most other failures Unavailable: ZERO_IO_ERROR in the C ABI).
#ifndef ZERO_CORE_CKPT_FILE_UTIL_H_
#define ZERO_CORE_CKPT_FILE_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zero {
namespace ckpt {

// "what path: strerror(errno)" as an error of the matching kind
// (ErrnoToStatus).
absl::Status ErrnoError(const std::string& what, const std::string& path, int err);

std::string JoinPath(const std::string& a, const std::string& b);

// Writes `data` to `path` through `path.tmp`: write, fsync, rename, fsync of
// the parent directory. Readers see the old file or the new one, never part.
absl::Status WriteFileAtomic(const std::string& path, const std::string& data);

absl::StatusOr<std::string> ReadFile(const std::string& path);
absl::StatusOr<int64_t> FileSize(const std::string& path);
bool Exists(const std::string& path);

absl::Status MakeDirs(const std::string& path);  // mkdir -p
absl::Status FsyncDir(const std::string& path);
// rm -rf; a missing path is fine.
absl::Status RemoveTree(const std::string& path);

// Moves the finished directory `staging` to `target` in one rename; an
// existing `target` is swapped out atomically (renameat2 RENAME_EXCHANGE)
// and then removed. Fsyncs the parent.
absl::Status CommitDir(const std::string& staging, const std::string& target);

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_FILE_UTIL_H_
