// Saving a checkpoint (docs/ARCHITECTURE.md, "Checkpoints"). Layout of DIR:
//   DIR/TAG/manifest.json      rank 0, written last
//   DIR/TAG/rank_00000.bin ... one per rank (core/ckpt/shard_file.h)
//   DIR/latest                 the newest finished TAG, updated after it
// Every rank writes its file into DIR/.TAG.partial/ (temporary name, fsync,
// rename); after all have, rank 0 writes the manifest there and swaps the
// directory into DIR/TAG in one rename. A crash at any point leaves the
// previous checkpoints and `latest` untouched.
#ifndef ZERO_CORE_CKPT_CHECKPOINT_WRITER_H_
#define ZERO_CORE_CKPT_CHECKPOINT_WRITER_H_

#include <string>

#include "absl/status/status.h"
#include "core/ckpt/manifest.h"
#include "core/ckpt/shard_view.h"
#include "core/comm/communicator.h"

namespace zero {
namespace ckpt {

// COLLECTIVE. Fails on every rank if any rank fails (micro_step != 0, I/O,
// cancelled by the progress callback), naming the rank and the file.
absl::Status SaveCheckpoint(const ShardView& view, Communicator* comm,
                            const std::string& dir, const std::string& tag,
                            const SaveOptions& options);

// The view a save writes: `view` without its frozen params when
// options.exclude_frozen (pointers shared, nothing copied).
ShardView SavedView(const ShardView& view, const SaveOptions& options);

// Where a tag is assembled before it is published.
std::string StagingDir(const std::string& dir, const std::string& tag);

// Writes `m` as the manifest of the finished files in `staging`, moves
// staging to DIR/TAG and points DIR/latest at it (each step atomic).
absl::Status PublishTag(const std::string& dir, const std::string& tag,
                        const std::string& staging, Manifest m);

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_CHECKPOINT_WRITER_H_
