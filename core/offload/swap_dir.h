// One engine rank's claim on an NVMe swap directory (docs/ARCHITECTURE.md,
// "Offload"): a lock file `zero_r<rank>_p<pid>_<n>.lock`, held with flock for
// the claim's life, names the files the claim creates (they start with the
// same stem). The kernel drops the lock when its process dies however it
// dies, so a later claim on the same directory tells a leftover of a killed
// run (lock file not held) from a live engine's files (held, by this process
// or another): leftovers are removed with a message, live files are left
// alone. Before any file is created the claim checks that the bytes it will
// preallocate are free.
#ifndef ZERO_CORE_OFFLOAD_SWAP_DIR_H_
#define ZERO_CORE_OFFLOAD_SWAP_DIR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zero {
namespace offload {

class SwapDir {
 public:
  // `key` names the config key in errors ("offload_optimizer.nvme_path").
  // Errors: NotFound (no such directory), FailedPrecondition (not a
  // directory), PermissionDenied, ResourceExhausted (fewer than `bytes`
  // free: the message gives both).
  static absl::StatusOr<std::unique_ptr<SwapDir>> Claim(const std::string& dir,
                                                        const std::string& key, int rank,
                                                        int64_t bytes);
  ~SwapDir();  // removes the lock file (the files' owners remove theirs first)
  SwapDir(const SwapDir&) = delete;
  SwapDir& operator=(const SwapDir&) = delete;

  // A path for one of this claim's files: dir/<stem>_<name>.
  std::string Path(const std::string& name) const;
  // Its file name: <stem>_<name>.
  std::string Name(const std::string& name) const;
  const std::string& dir() const { return dir_; }
  // What the claim cleaned up (empty: nothing), for a log line.
  const std::string& note() const { return note_; }

  // Bytes free to an unprivileged writer under `dir` (statvfs), or -1.
  static int64_t FreeBytes(const std::string& dir);

 private:
  SwapDir() = default;

  std::string dir_, stem_, lock_path_, note_;
  int lock_fd_ = -1;
};

}  // namespace offload
}  // namespace zero

#endif  // ZERO_CORE_OFFLOAD_SWAP_DIR_H_
