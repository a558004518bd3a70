// One rank's shard of stage-3 working params on NVMe
// (offload_param.device = "nvme"): a file per group, preallocated, with one
// slot written in place by a step (a failed step fails the engine), or with
// `atomic_step` two slots like the optimizer tier (nvme_tier.h): gathers read
// the committed slot, a step writes the other and Commit() flips, so a
// failed step leaves the previous working copy whole. Transfers are O_DIRECT through
// 4 KiB-aligned bounce buffers (unaligned edges read-modify-write) where the
// file system allows it, buffered otherwise; a read into (a write from) a
// buffer with the offset's alignment moves its aligned middle straight into
// (out of) it, with no copy. Blocking: reads are small
// (one param's slice) and run on the comm stream ahead of the collective.
#ifndef ZERO_CORE_OFFLOAD_PARAM_FILE_H_
#define ZERO_CORE_OFFLOAD_PARAM_FILE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zero {
namespace offload {

class ParamFile {
 public:
  // `bytes` per slot, `slots` 1 or 2. Errors as NvmeTier::Create, naming
  // offload_param.nvme_path.
  static absl::StatusOr<std::unique_ptr<ParamFile>> Create(const std::string& dir,
                                                           const std::string& name,
                                                           int64_t bytes,
                                                           bool try_direct = true,
                                                           int slots = 1);
  ~ParamFile();  // closes and removes the file
  // Bytes one slot of `bytes` takes on disk (rounded up to 4 KiB).
  static int64_t SlotBytes(int64_t bytes) {
    return bytes <= 4096 ? 4096 : (bytes + 4095) / 4096 * 4096;
  }

  // Bytes [offset, offset+len) of the committed slot.
  absl::Status Read(int64_t offset, int64_t len, void* out);
  // Bytes [offset, offset+len) of the next slot (Commit makes it current);
  // with one slot, of the only one.
  absl::Status Write(int64_t offset, int64_t len, const void* in);
  // Writes into the committed slot directly (initial values only).
  absl::Status WriteCommitted(int64_t offset, int64_t len, const void* in);
  void Commit() {
    if (slots_ == 2) committed_ ^= 1;
  }

  const std::string& path() const { return path_; }
  int64_t file_bytes() const { return slots_ * slot_; }
  bool direct_io() const { return direct_; }

 private:
  ParamFile() = default;
  absl::Status Io(int slot, int64_t offset, int64_t len, char* data, bool write);
  absl::Status Move(int slot, int64_t offset, int64_t len, char* data, bool write);  // mu_ held
  absl::Status CheckSize() const;

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  int64_t slot_ = 0;  // bytes, rounded up to 4 KiB
  int slots_ = 1;
  int committed_ = 0;
  std::mutex mu_;     // gathers (comm stream) and steps (caller) share the bounce
};

}  // namespace offload
}  // namespace zero

#endif  // ZERO_CORE_OFFLOAD_PARAM_FILE_H_
