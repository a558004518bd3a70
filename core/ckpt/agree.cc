#include "core/ckpt/agree.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace zero {
namespace ckpt {

absl::Status Agree(Communicator* comm, const absl::Status& local) {
  const int world = comm->world_size(), rank = comm->rank();
  if (world == 1) return local;
  ScopedCountingKind k(comm, CollectiveKind::kControl);
  // Lowest failing rank wins: max of (world - rank).
  double flag = local.ok() ? 0.0 : static_cast<double>(world - rank);
  RETURN_IF_ERROR(comm->AllReduce(&flag, 1, ReduceOp::kMax));
  if (flag == 0.0) return absl::OkStatus();
  const int root = world - static_cast<int>(flag);
  int64_t head[2] = {static_cast<int64_t>(local.code()),
                     static_cast<int64_t>(local.message().size())};
  RETURN_IF_ERROR(comm->Broadcast(head, sizeof(head), root));
  std::string msg(static_cast<size_t>(head[1]), '\0');
  if (rank == root) msg = std::string(local.message());
  if (head[1] > 0) RETURN_IF_ERROR(comm->Broadcast(&msg[0], head[1], root));
  if (rank == root) return local;
  return absl::Status(static_cast<absl::StatusCode>(head[0]),
                      absl::StrCat("rank ", root, ": ", msg));
}

}  // namespace ckpt
}  // namespace zero
