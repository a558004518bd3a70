// Offline resharding: rewrites DIR/TAG as OUT_DIR/TAG for `world` ranks, cut
// the way an engine of that world size lays its shards out (so each rank of
// the new run reads only its own file). Loading reshards by itself; this is
// for moving a checkpoint to a different cluster size ahead of time.
#ifndef ZERO_CORE_CKPT_RESHARD_H_
#define ZERO_CORE_CKPT_RESHARD_H_

#include <string>

#include "absl/status/status.h"
#include "core/ckpt/shard_view.h"

namespace zero {
namespace ckpt {

absl::Status ReshardCheckpoint(const std::string& dir, const std::string& tag,
                               const std::string& out_dir, int world,
                               const ProgressFn& progress = nullptr);

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_RESHARD_H_
