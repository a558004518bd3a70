// Optimizer state on NVMe (docs/ARCHITECTURE.md, "Offload"): one file per rank and
// sub-group holding fp32 master weights and moments (or the packed moments
// of optimizer.moments_format), streamed through a few aligned host buffers.
//
// Layout. A group's owned range is cut into chunks of at most
// `chunk_elems` elements; a chunk is stored as `num_arrays` regions (master,
// m, v), each array_bytes(a, len) bytes padded to 4 KiB, so one chunk is one
// contiguous O_DIRECT read.
//
// Slots. By default a file holds one slot: a step reads each chunk and
// writes it back in place, so a step that fails part-way leaves the state
// partly updated; the tier then refuses every later access (the engine
// fails and points at the last checkpoint). With `atomic_step` every file
// holds two slots (twice the disk): a step reads the committed slot and
// writes the other, which becomes committed only when every write of the
// step completed on every rank (the caller's `agree`), so a failed step
// leaves the previous state whole.
//
// Files are preallocated (posix_fallocate, no holes) at Create, after a
// free-space check, so a full disk fails there with the bytes needed and
// free rather than in a step; they live in a SwapDir claim (swap_dir.h).
//
// Pipeline. With B = buffer_count host buffers, chunk k is updated while
// chunk k+1.. k+B-2 are read and chunk k-1 is written; host memory for
// optimizer state is B * chunk bytes, whatever the model size.
#ifndef ZERO_CORE_OFFLOAD_NVME_TIER_H_
#define ZERO_CORE_OFFLOAD_NVME_TIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/progress.h"
#include "core/offload/aio.h"
#include "core/offload/swap_dir.h"

namespace zero {
namespace offload {

struct NvmeTierOptions {
  std::string dir;          // offload_optimizer.nvme_path
  std::string key = "offload_optimizer.nvme_path";  // in errors
  int rank = 0;             // in the claim's name and in errors
  std::string tag = "optim";  // file names: <claim stem>_<tag>_g<g>.swp
  bool atomic_step = false;   // two slots, flipped after every rank wrote
  int num_arrays = 3;       // master, m, v (SGD: 1 or 2)
  int buffer_count = 4;     // host buffers, >= 2
  int64_t chunk_elems = 1;  // sub_group_size
  // Bytes of array a over n elements from a chunk's start (null: 4n, fp32).
  // Packed moments (core/engine/packed_moments.h) are narrower: 8-bit blocks
  // of 64 elements are 136 bytes. A range read or written (ReadBytes,
  // WriteBytes) must start where array_bytes is exact: a block start, which
  // every chunk start is (chunk_elems a multiple of the block).
  std::function<int64_t(int a, int64_t n)> array_bytes;
  bool try_direct = true;   // O_DIRECT unless the file system refuses it
  AioOptions aio;
  // Where the host buffers come from (null: aligned_alloc): with state on a
  // GPU the engine's device, page-locked when pin_memory (NVMe <-> pinned
  // host <-> device, docs/ARCHITECTURE.md "Offload"). The tier asks for
  // 4 KiB more than it needs and aligns for O_DIRECT itself.
  std::function<absl::StatusOr<void*>(size_t bytes)> alloc_host;
  std::function<void(void* p)> free_host;
  // "nvme preallocate" after each file's blocks are reserved (Create),
  // "nvme initialize" after each chunk's first write (Initialize); false
  // cancels: the call fails with Cancelled.
  ProgressCallback progress;
};

struct NvmeTierStats {
  int64_t host_bytes = 0;        // aligned host buffers held now
  int64_t host_high_water = 0;   // most ever held
  int64_t file_bytes = 0;        // on disk, every slot
  int64_t bytes_read = 0, bytes_written = 0;  // cumulative
  bool direct_io = false, uring = false;
  std::string note;              // fallbacks taken, leftovers removed, for logs
};

class NvmeTier {
 public:
  struct Chunk {
    int group;
    int64_t begin, len;  // elements, within the group's owned range
    int64_t file_offset; // of this chunk inside one slot
  };
  // arrays[a] points at array a (0 master, 1 m, 2 v) of the chunk's `len`
  // elements: len floats, or array_bytes(a, len) packed bytes.
  using ChunkFn = std::function<absl::Status(const Chunk&, float* const* arrays)>;

  // One file per group with group_lens[g] owned elements. Errors name the
  // path: NotFound (missing), FailedPrecondition (not a directory),
  // PermissionDenied, ResourceExhausted (no space).
  static absl::StatusOr<std::unique_ptr<NvmeTier>> Create(
      const NvmeTierOptions& options, const std::vector<int64_t>& group_lens);
  ~NvmeTier();  // closes and removes the files

  const std::vector<Chunk>& chunks() const { return chunks_; }
  const std::vector<std::string>& paths() const { return paths_; }

  // Writes the initial state: fn fills each chunk's arrays (they arrive
  // zeroed), written to the committed slot.
  absl::Status Initialize(const ChunkFn& fn);

  // One optimizer step: for each chunk in order, read (committed slot),
  // fn (update in place), write (other slot), pipelined. Then
  // agree(local_ok) returns whether every rank succeeded; only then the
  // committed slot flips. Returns the first local error, or the agreement's.
  absl::Status Update(const ChunkFn& fn,
                      const std::function<absl::StatusOr<bool>(bool)>& agree);

  // Only inside Update's fn for chunk k: chunk k+1 once its read completed
  // (waits for it) and its arrays, the buffer fn gets next, so a caller can
  // start moving it (an upload to a GPU) while chunk k is updated. `chunk`
  // is null for the last chunk, outside Update, or when the read failed
  // (Update returns that error at chunk k+1).
  struct Next {
    const Chunk* chunk = nullptr;
    float* arrays[3] = {nullptr, nullptr, nullptr};
  };
  Next PeekNext();

  // Whether a failed step left the files partly updated (one slot): every
  // later call fails.
  bool damaged() const { return !damaged_.ok(); }

  // Reads the committed state of elements [begin, begin+len) of array `a`
  // of group `g` into out.
  absl::Status ReadRange(int g, int a, int64_t begin, int64_t len, float* out);

  // Overwrites the committed state of those elements (checkpoint loads).
  absl::Status WriteRange(int g, int a, int64_t begin, int64_t len, const float* in);

  // The same for an array of any width: array_bytes(a, len) bytes at
  // `out`/`in`; `begin` where array_bytes is exact (a block start).
  absl::Status ReadBytes(int g, int a, int64_t begin, int64_t len, void* out);
  absl::Status WriteBytes(int g, int a, int64_t begin, int64_t len, const void* in);

  NvmeTierStats stats() const;

 private:
  NvmeTier(const NvmeTierOptions& options) : options_(options) {}
  absl::Status CheckSizes() const;
  Aio::Ticket Io(const Chunk& c, int slot, char* buf, bool write);
  // Reads (and with `in`, rewrites) the chunks of group g overlapping
  // [begin, begin+len) of array a, committed slot.
  absl::Status Range(int g, int a, int64_t begin, int64_t len, void* out, const void* in);
  // Bytes of array a over n elements, unpadded.
  int64_t array_bytes(int a, int64_t n) const;
  // Where array a's region starts in chunk c's slot (each region padded
  // to 4 KiB); region_offset(c, num_arrays) is the chunk's size.
  int64_t region_offset(const Chunk& c, int a) const;
  int64_t chunk_bytes(const Chunk& c) const { return region_offset(c, options_.num_arrays); }
  // The chunk's arrays inside buffer `buf`.
  void ArraysIn(const Chunk& c, char* buf, float** arrays) const;

  NvmeTierOptions options_;
  std::unique_ptr<Aio> aio_;
  std::vector<Chunk> chunks_;
  std::vector<int> fds_;
  std::vector<std::string> paths_;
  std::vector<int64_t> slot_bytes_;
  int slots_ = 1;
  int committed_ = 0;  // the slot holding the last completed step
  absl::Status damaged_;  // set by a failed in-place step
  std::unique_ptr<SwapDir> claim_;
  std::vector<char*> buffers_;  // 4 KiB-aligned, inside raw_buffers_
  std::vector<void*> raw_buffers_;  // as allocated (alloc_host or aligned_alloc)
  int64_t buffer_bytes_ = 0;
  NvmeTierStats stats_;
  // Update's state for PeekNext: its read tickets, the chunk fn is on, and
  // the chunk read early by PeekNext with that read's status.
  std::vector<Aio::Ticket>* update_rd_ = nullptr;
  size_t update_k_ = 0;
  size_t peeked_ = static_cast<size_t>(-1);
  absl::Status peek_status_;
};

}  // namespace offload
}  // namespace zero

#endif  // ZERO_CORE_OFFLOAD_NVME_TIER_H_
