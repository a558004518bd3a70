// Reading a checkpoint: `Checkpoint` opens DIR/TAG offline (no engine, no
// communication) for inspect / verify / export / reshard; LoadCheckpoint
// fills a rank's view from it. Params are matched by name and their saved
// slices intersected with the element range each rank owns now, so world
// size and stage may differ from the saving run.
#ifndef ZERO_CORE_CKPT_CHECKPOINT_READER_H_
#define ZERO_CORE_CKPT_CHECKPOINT_READER_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ckpt/manifest.h"
#include "core/ckpt/shard_file.h"
#include "core/ckpt/shard_view.h"
#include "core/comm/communicator.h"

namespace zero {
namespace ckpt {

class Checkpoint {
 public:
  // `tag` empty: the one DIR/latest names. Reads and checks the manifest; a
  // tag without one is an unfinished save (NotFound).
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir,
                                                          const std::string& tag);

  const Manifest& manifest() const { return m_; }
  const std::string& path() const { return path_; }  // DIR/TAG

  // Rank r's file, opened once and checked against the manifest (size,
  // index checksum).
  absl::StatusOr<const ShardFileReader*> File(int rank);

  // Elements [lo, hi) of state `kind` of `p` into dst[0 .. hi-lo), from every
  // saved slice that overlaps; each section read is verified whole.
  absl::Status ReadRange(const ParamRecord& p, int kind, int64_t lo, int64_t hi,
                         float* dst, Progress* progress);
  // The same, handing the elements to `sink` (first counted from lo).
  absl::Status ReadRange(const ParamRecord& p, int kind, int64_t lo, int64_t hi,
                         const ShardFileReader::Sink& sink, Progress* progress);
  // Bytes ReadRange streams for that range (for progress totals).
  int64_t RangeBytes(const ParamRecord& p, int64_t lo, int64_t hi) const;

  // Every file and section: footers, checksums, and that each section the
  // manifest implies is there. Errors name the file and section.
  absl::Status Verify(const ProgressFn& progress = nullptr);
  int64_t TotalBytes() const;  // sum of the rank files' sizes

 private:
  Checkpoint() = default;
  std::string path_;
  Manifest m_;
  std::map<int, std::unique_ptr<ShardFileReader>> files_;
};

// COLLECTIVE. Fills the view's owned ranges (master; optimizer states or
// zeros; frozen params whole) from DIR/TAG and returns the manifest, whose
// steps and loss-scaler state the caller restores. Every rank returns the
// same error if any fails. *touched tells whether the view's memory was
// written before a failure (checksum errors are found while reading).
absl::StatusOr<Manifest> LoadCheckpoint(const ShardView& view, Communicator* comm,
                                        const std::string& dir, const std::string& tag,
                                        const LoadOptions& options, bool* touched);

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_CHECKPOINT_READER_H_
