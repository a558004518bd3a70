#include "core/comm/mpi_local_doorbell.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"

namespace zero {
namespace {

// Off by default: in bench/README.md's A/Bs ("Waiting under load") it moved
// the wall by less than the rounds' spread.
constexpr bool kDoorbellDefault = false;

void LogFallbackOnce(const std::string& why) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  std::fprintf(stderr, "[zero] mpi: waits sleep on timers, no local doorbell: %s\n",
               why.c_str());
}

bool AllAgree(bool mine, MPI_Comm comm) {
  int v = mine ? 1 : 0, all = 0;
  if (MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) return false;
  return all == 1;
}

// A name no other job on the node uses: the creator's pid, a per-process
// count and 64 random bits (shm_open's O_EXCL refuses a clash anyway).
std::string SegmentName() {
  static std::atomic<unsigned> made{0};
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  return absl::StrCat("/zero-doorbell-", getpid(), "-", made.fetch_add(1), "-", r);
}

}  // namespace

bool DoorbellFromEnv() {
  const char* e = std::getenv("ZERO_MPI_DOORBELL");
  if (e == nullptr || *e == '\0') return kDoorbellDefault;
  return std::strcmp(e, "0") != 0;
}

std::unique_ptr<LocalDoorbell> MakeMpiLocalDoorbell(MPI_Comm comm) {
  int world = 1, rank = 0;
  MPI_Comm_size(comm, &world);
  MPI_Comm_rank(comm, &rank);
  if (world < 2) return nullptr;
  // Off on any rank (the default): no node communicator is made at all.
  const bool on = DoorbellFromEnv();
  if (!AllAgree(on, comm)) return nullptr;
  MPI_Comm local = MPI_COMM_NULL;
  int lsize = 0, lrank = 0;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) ==
      MPI_SUCCESS) {
    MPI_Comm_size(local, &lsize);
    MPI_Comm_rank(local, &lrank);
  }
  // Whether every rank shares this node: a peer on another node could
  // never ring (ranks on more nodes than one wait on timers).
  if (!AllAgree(local != MPI_COMM_NULL && lsize == world, comm)) {
    if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
    LogFallbackOnce("the communicator's ranks are not all on one node");
    return nullptr;
  }
  char name[96] = {0};
  absl::StatusOr<std::unique_ptr<LocalDoorbell>> bell =
      absl::UnavailableError("local doorbell: local rank 0 could not create the segment");
  if (lrank == 0) {
    const std::string n = SegmentName();
    bell = LocalDoorbell::Create(n, lsize, lrank);
    if (bell.ok()) std::snprintf(name, sizeof(name), "%s", n.c_str());
  }
  MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, local);
  if (lrank != 0 && name[0] != '\0') bell = LocalDoorbell::Open(name, lsize, lrank);
  // Every rank has mapped it (or failed to): the name can go.
  const bool all = AllAgree(bell.ok(), comm);
  if (lrank == 0 && name[0] != '\0') (void)LocalDoorbell::Unlink(name);
  MPI_Comm_free(&local);
  if (!all) {
    LogFallbackOnce(bell.ok() ? std::string("a peer could not map the shared segment")
                              : std::string(bell.status().message()));
    return nullptr;
  }
  return std::move(*bell);
}

}  // namespace zero
