// COLLECTIVE. Makes every rank return the same outcome: if any rank's
// `local` failed, all ranks return the lowest failing rank's status (code and
// message, prefixed with "rank R: " on the others), so no rank goes on to a
// collective that a failed peer will never join. Costs one all-reduce when
// all succeed.
#ifndef ZERO_CORE_CKPT_AGREE_H_
#define ZERO_CORE_CKPT_AGREE_H_

#include "absl/status/status.h"
#include "core/comm/communicator.h"

namespace zero {
namespace ckpt {

absl::Status Agree(Communicator* comm, const absl::Status& local);

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_AGREE_H_
