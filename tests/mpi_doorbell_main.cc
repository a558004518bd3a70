// The local doorbell over MPI (run by //tests:mpi_doorbell_np{2,3,4}):
//   - MakeMpiLocalDoorbell maps one segment on every rank, unlinks its
//     name before returning (nothing is left in /dev/shm), and a ring from
//     rank 0 wakes every other rank well before its timeout;
//   - with ZERO_MPI_DOORBELL=0 it is null on every rank (timed sleeps);
//   - collectives (1 to 1M elements, where the waits sleep between tests on
//     this 2-core machine) and engine steps (stages 0-3, fp32 and bf16)
//     through a communicator with the doorbell give the bits of the same
//     through one without it.
#include <dirent.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/comm/mpi_communicator.h"
#include "core/comm/mpi_local_doorbell.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/rank_expect.h"

namespace zero {
namespace testing {
namespace {

// Segments in /dev/shm named for a doorbell made by process `pid`.
int SegmentsOf(int pid) {
  const std::string prefix = "zero-doorbell-" + std::to_string(pid) + "-";
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) n += std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
    closedir(d);
  }
  return n;
}

void BellOverMpi(int rank, int world) {
  setenv("ZERO_MPI_DOORBELL", "1", 1);
  auto bell = MakeMpiLocalDoorbell(MPI_COMM_WORLD);
  Expect(bell != nullptr, rank, "no doorbell with ZERO_MPI_DOORBELL=1 on one node");
  int pid0 = getpid();
  MPI_Bcast(&pid0, 1, MPI_INT, 0, MPI_COMM_WORLD);
  Expect(SegmentsOf(pid0) == 0, rank, "the doorbell's segment is still named in /dev/shm");
  if (bell == nullptr) return;
  Expect(bell->ranks() == world, rank, "doorbell words != ranks");
  for (int round = 0; round < 3; ++round) {
    const uint32_t seen = bell->Seen();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      usleep(50000);
      bell->RingOthers();
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      bool rung = false;
      while (!rung && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
        rung = bell->Wait(seen, std::chrono::seconds(20));
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Expect(rung && s < 10, rank, "rank 0's ring woke this rank after " + std::to_string(s) + " s");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  setenv("ZERO_MPI_DOORBELL", "0", 1);
  auto off = MakeMpiLocalDoorbell(MPI_COMM_WORLD);
  Expect(off == nullptr, rank, "a doorbell with ZERO_MPI_DOORBELL=0");
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

float Value(int rank, int64_t i) {
  return static_cast<float>(((i * 7919 + rank * 104729) % 2001) - 1000) / 997.0f;
}

// The same collectives through both communicators, bit for bit.
void CollectivesSame(Communicator* on, Communicator* off) {
  const int rank = on->rank(), W = on->world_size();
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{65536}, int64_t{1} << 20}) {
    std::vector<float> piece(n), send(n * W);
    for (int64_t i = 0; i < n; ++i) piece[i] = Value(rank, i);
    for (int64_t i = 0; i < n * W; ++i) send[i] = Value(rank, i + 3);
    const std::vector<int64_t> counts(W, n);
    std::vector<float> g[2], rs[2], ar[2], bc[2];
    Communicator* comms[2] = {on, off};
    for (int k = 0; k < 2; ++k) {
      g[k].assign(n * W, 0.0f);
      rs[k].assign(n, 0.0f);
      ar[k] = piece;
      bc[k] = rank == W - 1 ? piece : std::vector<float>(n, 0.0f);
      Expect(comms[k]->AllGatherV(piece.data(), g[k].data(), counts, DType::kF32).ok(), rank,
             "all-gather");
      Expect(comms[k]->ReduceScatterV(send.data(), rs[k].data(), counts).ok(), rank,
             "reduce-scatter");
      Expect(comms[k]->AllReduce(ar[k].data(), n, ReduceOp::kSum).ok(), rank, "all-reduce");
      Expect(comms[k]->Broadcast(bc[k].data(), n * sizeof(float), W - 1).ok(), rank, "broadcast");
    }
    const std::string at = " of " + std::to_string(n) + " elements";
    Expect(SameBits(g[0], g[1]), rank, "all-gather" + at + " differs with the doorbell");
    Expect(SameBits(rs[0], rs[1]), rank, "reduce-scatter" + at + " differs with the doorbell");
    Expect(SameBits(ar[0], ar[1]), rank, "all-reduce" + at + " differs with the doorbell");
    Expect(SameBits(bc[0], bc[1]), rank, "broadcast" + at + " differs with the doorbell");
  }
}

void StepsSame(Communicator* on, Communicator* off) {
  const int rank = on->rank();
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      Config c = SmallMlpConfig(stage, t);
      c.comm_timeout_seconds = 60;
      MlpSpec spec;
      auto a = TrainMlp(c, on, spec);
      auto b = TrainMlp(c, off, spec);
      const std::string name = "stage " + std::to_string(stage) + " " + DTypeName(t);
      Expect(a.ok() && b.ok(), rank, name + ": a run failed");
      if (!a.ok() || !b.ok()) continue;
      bool same = a->params.size() == b->params.size() && !a->params.empty();
      for (size_t p = 0; same && p < a->params.size(); ++p) same = SameBits(a->params[p], b->params[p]);
      for (size_t s = 0; same && s < a->steps.size(); ++s) {
        same = std::memcmp(&a->steps[s].loss_scale, &b->steps[s].loss_scale, sizeof(double)) == 0 &&
               std::memcmp(&a->steps[s].grad_norm, &b->steps[s].grad_norm, sizeof(double)) == 0 &&
               a->steps[s].skipped == b->steps[s].skipped;
      }
      Expect(same, rank, name + ": params after the steps differ with the doorbell");
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero

int main() {
  using namespace zero;
  setenv("ZERO_MPI_DOORBELL", "1", 1);
  auto on = MakeMpiCommunicator(nullptr);
  setenv("ZERO_MPI_DOORBELL", "0", 1);
  auto off = MakeMpiCommunicator(nullptr);
  if (!on.ok() || !off.ok()) {
    std::fprintf(stderr, "no MPI communicator\n");
    return 1;
  }
  (*on)->set_timeout_seconds(120);
  (*off)->set_timeout_seconds(120);
  const int rank = (*on)->rank(), world = (*on)->world_size();
  testing::BellOverMpi(rank, world);
  testing::CollectivesSame(on->get(), off->get());
  testing::StepsSame(on->get(), off->get());
  return testing::SumChecksOverRanks(on->get(), "mpi_doorbell");
}
