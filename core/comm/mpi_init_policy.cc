#include "core/comm/mpi_init_policy.h"

#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/comm/mpi_core_count.h"

namespace zero {
namespace {

std::atomic<bool> g_broken{false};
// Below MPI_THREAD_MULTIPLE (MPI initialized by the application with
// SERIALIZED), the workers of different communicators take turns.
std::atomic<bool> g_serialize{false};
std::mutex g_serial_mu;

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_broken.load()) MPI_Finalize();
}

}  // namespace

absl::Status EnsureMpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    g_serialize = provided < MPI_THREAD_MULTIPLE;
    if (provided < MPI_THREAD_SERIALIZED) {
      return absl::FailedPreconditionError(
          "mpi communicator: MPI was initialized without thread support "
          "(need MPI_THREAD_SERIALIZED or MULTIPLE); zero runs communication "
          "on its own thread");
    }
    return absl::OkStatus();
  }
  // OpenMPI's blocking calls spin in their progress loop while they wait
  // (for a peer, or for a peer's comm thread to get a core mid-transfer);
  // with more threads than cores that spin is taken from the compute
  // threads. mpi_yield_when_idle makes the loop yield the core when it
  // made no progress: OpenMPI sets it itself only when the ranks outnumber
  // the node's slots, not when their threads do (bench/README.md, "Waiting
  // without spinning"). The user's own setting wins; an application that
  // initialized MPI itself keeps its own.
  // With more ranks than cores OpenMPI decides itself (setting it there
  // made the C engine's stage-3 step ~20 % slower at 4 ranks on 2 cores).
  const bool yield = ThreadsOutnumberCores() && !RanksOutnumberCores() &&
                     std::getenv("OMPI_MCA_mpi_yield_when_idle") == nullptr;
  if (yield) setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
  int provided = 0;
  const int init_rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (yield) unsetenv("OMPI_MCA_mpi_yield_when_idle");  // not inherited by children
  if (init_rc != MPI_SUCCESS) {
    return absl::InternalError("mpi communicator: MPI_Init_thread failed");
  }
  g_serialize = provided < MPI_THREAD_MULTIPLE;
  std::atexit(FinalizeAtExit);
  return absl::OkStatus();
}

std::mutex* MpiSerialMutex() {
  return g_serialize.load(std::memory_order_relaxed) ? &g_serial_mu : nullptr;
}

bool MpiSerialized() { return g_serialize.load(); }

void MarkMpiBroken() { g_broken = true; }

bool DirectModeFromEnv() {
  const char* e = std::getenv("ZERO_MPI_WATCHDOG");
  return e != nullptr && std::strcmp(e, "1") == 0;
}

}  // namespace zero
