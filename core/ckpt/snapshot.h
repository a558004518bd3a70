// The copy an asynchronous save writes from (docs/ARCHITECTURE.md,
// "Asynchronous checkpoints"): this rank's saved slices of every state, and
// on rank 0 the frozen params, copied into one host buffer that is kept
// and reused by the next save (page-locked beside a GPU, so the download
// runs at full speed). The returned view points into that buffer only, so
// training may change the live state while the background thread writes.
#ifndef ZERO_CORE_CKPT_SNAPSHOT_H_
#define ZERO_CORE_CKPT_SNAPSHOT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "core/ckpt/shard_view.h"
#include "core/device/device.h"

namespace zero {
namespace ckpt {

class SnapshotBuffer {
 public:
  SnapshotBuffer() = default;
  SnapshotBuffer(const SnapshotBuffer&) = delete;
  SnapshotBuffer& operator=(const SnapshotBuffer&) = delete;
  ~SnapshotBuffer() { Release(); }

  // At least `floats` fp32 elements, allocated by `owner` (page-locked when
  // it is a device that has such memory; plain host memory for null).
  absl::StatusOr<float*> Reserve(Device* owner, int64_t floats);
  int64_t capacity() const { return capacity_; }

 private:
  void Release();
  Device* owner_ = nullptr;
  float* data_ = nullptr;
  int64_t capacity_ = 0;
};

// Host memory of dtype t -> fp32 (how every saved value becomes fp32).
void HostToF32(const void* src, DType t, float* dst, int64_t n);

// Elements a snapshot of `live` holds on its rank.
int64_t SnapshotFloats(const ShardView& live);

// Copies what `live` would save on its rank into `buf` and returns a view
// of the copy (host memory, no device, no `io`); the rest of the view
// (layout, steps, scaler, config) is `live`'s. State on NVMe is read
// through `io`. Fails naming the param if a state cannot be read.
absl::StatusOr<ShardView> TakeSnapshot(const ShardView& live, SnapshotBuffer* buf);

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_SNAPSHOT_H_
