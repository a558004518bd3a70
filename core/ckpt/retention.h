// keep_last (docs/ARCHITECTURE.md, "Asynchronous checkpoints"): after a tag
// is published, the oldest finished tags of DIR beyond the newest K go.
// Only directories holding a manifest.json are tags; order is the
// manifest's global step (then the manifest's modification time), and the
// tag just published and the one `latest` names are never deleted, so a
// crash at any point leaves `latest` whole.
#ifndef ZERO_CORE_CKPT_RETENTION_H_
#define ZERO_CORE_CKPT_RETENTION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zero {
namespace ckpt {

// Deletes the oldest tags of `dir` so that `keep_last` remain (<= 0: none
// deleted); returns the deleted tags, oldest first. Not collective: rank 0
// runs it after PublishTag.
absl::StatusOr<std::vector<std::string>> PruneTags(const std::string& dir, int keep_last,
                                                   const std::string& published);

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_RETENTION_H_
