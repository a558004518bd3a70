#include "core/backend/standin_select.h"

#include <cstdlib>
#include <cstring>

#include "core/backend/standin_comm.h"
#include "core/comm/mpi_communicator.h"

namespace zero {

bool GpuStandinSelected() {
  const char* v = std::getenv("ZERO_GPU_STANDIN");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeStandinNcclComm(const void* mpi_comm,
                                                                  double timeout_seconds) {
  auto inner = MakeMpiCommunicator(mpi_comm);
  if (!inner.ok()) return inner.status();
  (*inner)->set_timeout_seconds(timeout_seconds);
  return MakeStandinDeviceComm(std::move(*inner));
}

}  // namespace zero
