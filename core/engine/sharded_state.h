// The working copy and the gradients of the flat groups on this rank, and
// the frozen params (docs/ARCHITECTURE.md, "The engine's parts"):
//   working: stages 0-2 the whole padded group; stage 3 this rank's shard
//            (or, with offload_param "nvme", that shard in a param file;
//            with offload_param "cpu" and device state, in host memory,
//            page-locked with pin_memory: uploaded for each gather);
//   grads:   stages 0-1 the whole padded group; stages 2-3 this rank's shard
//            (stage 3 with offload_optimizer "nvme" on a host-accessible
//            device: that shard in a grad file per group, streamed like the
//            optimizer state).
// The fp32 master and moments are the optimizer-state store's.
#ifndef ZERO_CORE_ENGINE_SHARDED_STATE_H_
#define ZERO_CORE_ENGINE_SHARDED_STATE_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/comm/comm_stream.h"
#include "core/device/device.h"
#include "core/engine/engine_context.h"
#include "core/engine/param_registry.h"
#include "core/offload/param_file.h"
#include "core/offload/swap_dir.h"

namespace zero {

struct GroupShard {
  int64_t owned_begin = 0, owned_len = 0;  // this rank's range, in the group
  DeviceBuffer working;
  DeviceBuffer grads;
  // offload_param "cpu" with device state (stage 3): the owned working shard
  // in host memory (then `working` is empty).
  char* host_working = nullptr;
};

class ShardedState {
 public:
  ShardedState(EngineContext* ctx, const ParamRegistry* params)
      : ctx_(ctx), params_(params) {}
  ~ShardedState();

  // Allocates every group's working copy and gradients (and param files),
  // fills the working copy from the registered init values, and the frozen
  // params whole.
  absl::Status Allocate();

  int num_groups() const { return static_cast<int>(groups_.size()); }
  GroupShard& group(int g) { return groups_[g]; }
  const GroupShard& group(int g) const { return groups_[g]; }
  std::vector<int64_t> OwnedLengths() const;

  // Stages 0-2: param `li` in the working copy.
  void* WorkingPtr(int li) const;
  // Element `begin` of group g's owned range in the working copy (device
  // memory; host memory when params_on_host()).
  char* OwnedWorking(int g, int64_t begin);
  // Frozen param `id`, whole.
  void* Frozen(int id) const { return frozen_[id].data(); }

  // offload_param "nvme" (stage 3): the own working shard lives in files.
  bool params_on_nvme() const { return !param_files_.empty(); }
  // offload_param "cpu" with device state (stage 3): the own working shard
  // is host memory; written through device staging (PutOwned), uploaded for
  // each gather.
  bool params_on_host() const { return host_params_; }
  // The own working shard is host memory (offload_param "cpu") or read and
  // written through host memory (a param file) while the device is a GPU:
  // casts go through device staging, gathers upload the slice first.
  bool shard_on_host() const {
    return !ctx_->device->host_accessible() && (host_params_ || !param_files_.empty());
  }
  // n fp32 values cast to the working dtype into the owned working copy at
  // `dst` (an OwnedWorking pointer, or host staging for a param file): on
  // the device, then copied down when shard_on_host(), so the bits are the
  // device's cast either way.
  absl::Status PutOwnedF32(char* dst, const float* src, int64_t n);
  // n working-dtype elements from device memory `src` to `dst` (an
  // OwnedWorking pointer).
  void PutOwned(char* dst, const void* src, int64_t n);
  offload::ParamFile* param_file(int g) { return param_files_[g].get(); }
  void CommitParamFiles();

  // Stage 3 with offload_optimizer "nvme" (ZeRO-Infinity): the gradient
  // shard lives in a file per group (es bytes per owned element, one slot);
  // GroupShard::grads is empty. A group untouched since ZeroGrads reads as
  // zeros without IO; its first partial touch writes zeros over it.
  bool grads_on_nvme() const { return !grad_files_.empty(); }
  // grads[offset, offset+n) of group g += src * scale (AccumulateF32),
  // read-modify-write through a buffer of n elements. The write runs behind
  // on an IO thread (kGradWriteRing buffers deep, so the next bucket's
  // casts overlap it); its error comes back from a later call or from
  // FlushGradWrites, naming the file, and fails the peers at once (the
  // communicator's abort). A bucket overlapping what is already written
  // (accumulation) waits for the writes first, so its read sees them.
  absl::Status AccumulateGradF32(int g, int64_t offset, const float* src, float scale,
                                 int64_t n);
  // Waits for every gradient write in flight; the first error since the
  // last flush. Called on the thread that accumulates (the comm stream),
  // before the optimizer step reads the files.
  absl::Status FlushGradWrites();
  // grads[begin, begin+len) of group g, raw (the working dtype), into
  // `out` (device memory; zeros for a group untouched since ZeroGrads).
  // An error (never stale bytes) while gradient writes are unflushed.
  absl::Status ReadGradsRaw(int g, int64_t begin, int64_t len, void* out);
  int64_t grad_file_bytes() const;

  // Stage 3: param `li` all-gathered from every rank's shard into `dst`
  // (device memory). Collective; runs on the comm stream.
  absl::Status GatherInto(int li, void* dst);
  // The same with this rank's slice already on its way up (offload_param
  // "cpu" on a device with async_uploads(): UploadSlice at prefetch time):
  // the device waits for `event` before the all-gather reads `up`.
  absl::Status GatherUploaded(int li, void* dst, const void* up, void* event);
  // Starts the upload of this rank's host slice of `li` (params_on_host()
  // on a GPU) into `*up` on the copy stream; returns its event.
  absl::StatusOr<void*> UploadSlice(int li, DeviceBuffer* up);
  // Stage 3: this rank's slice of param `li` in the working copy (device
  // memory), or read from its param file into `into` when not null (host
  // accessible memory), else into `*scratch`.
  absl::StatusOr<const char*> OwnSlice(int li, std::vector<char>* scratch,
                                       char* into = nullptr);
  // Stages 1-2: every rank's updated shard of the working copy to all, in
  // all-gathers of at most allgather_bucket_size elements each.
  absl::Status AllGatherWorking();
  void ZeroGrads();
  // Param `li`'s working copy on this rank set from its full fp32 values:
  // stages 0-2 all of it; stage 3 the owned slice (memory or param file).
  absl::Status WriteWorking(int li, const float* values);
  // Frozen param `id` set from fp32 values.
  void WriteFrozen(int id, const float* values);

  // Elements [offset, offset+count) of param `li` from `values` (that many
  // fp32): stages 0-2 into the whole working copy; stage 3 the part inside
  // this rank's owned slice (memory or param file), the rest ignored.
  absl::Status WriteWorkingRange(int li, int64_t offset, int64_t count, const float* values);
  // Elements [offset, offset+count) of frozen param `id`.
  void WriteFrozenRange(int id, int64_t offset, int64_t count, const float* values);

  int64_t working_bytes() const;
  int64_t grad_bytes() const;
  int64_t frozen_bytes() const;
  int64_t param_file_bytes() const;
  // offload_param "cpu" with device state: the host bytes of the owned shard.
  int64_t host_param_bytes() const;
  // Staging for chunked publishing all-gathers (0 when one call suffices).
  int64_t gather_staging_bytes() const { return static_cast<int64_t>(gather_staging_.bytes()); }

 private:
  absl::Status CreateParamFiles();
  absl::Status CreateGradFiles();
  // AccumulateGradF32 and FlushGradWrites, without failing the peers.
  absl::Status AccumulateGradIo(int g, int64_t offset, const float* src, float scale, int64_t n);
  absl::Status WaitGradWrites();
  void AbortPeers(const absl::Status& s);
  // Elements each rank contributes to one publishing all-gather.
  int64_t GatherChunk() const;

  EngineContext* ctx_;
  const ParamRegistry* params_;
  std::vector<GroupShard> groups_;
  std::vector<DeviceBuffer> frozen_;  // by param id; empty when trainable
  // offload_param "nvme": the claim on nvme_path (outlives the files), and
  // one file per group; then GroupShard::working is empty.
  std::unique_ptr<offload::SwapDir> param_claim_;
  std::vector<std::unique_ptr<offload::ParamFile>> param_files_;
  // Gradient files (grads_on_nvme), their claim, and per group the one
  // element range [first, second) written since the last ZeroGrads: the
  // file holds the gradient there and zeros read outside it (empty: all).
  std::unique_ptr<offload::SwapDir> grad_claim_;
  std::vector<std::unique_ptr<offload::ParamFile>> grad_files_;
  std::vector<std::pair<int64_t, int64_t>> grad_valid_;
  DeviceBuffer gather_staging_;  // stages 1-2, chunked AllGatherWorking
  bool host_params_ = false;
  int64_t host_param_bytes_ = 0;
  // AccumulateGradF32's read-modify-write buffers (page-aligned: the file
  // writes go straight from them, core/offload/param_file.h), each reused
  // once its previous write completed, and the writer thread. Declared
  // last: destroyed first, so its queued writes run while the buffers
  // and files still exist.
  static constexpr int kGradWriteRing = 3;
  struct AlignedFree {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, AlignedFree> grad_io_[kGradWriteRing];
  int64_t grad_io_bytes_[kGradWriteRing] = {};
  CommStream::Handle grad_write_[kGradWriteRing];
  int64_t grad_writes_ = 0;                   // submitted since creation
  std::atomic<bool> grad_unflushed_{false};   // a write submitted, not flushed
  std::unique_ptr<CommStream> grad_writer_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_SHARDED_STATE_H_
