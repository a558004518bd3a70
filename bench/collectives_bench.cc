// Our communicator's all-gather / reduce-scatter / all-reduce / broadcast
// against the raw blocking MPI calls of the same sizes, in the same run, at
// 8 sizes from 1K to 16M elements (total per collective). Two communicators
// of ours: the default one (each blocking call handed to its worker thread,
// the caller waiting with the deadline: `ours_ms`) and one in direct mode
// (ZERO_MPI_WATCHDOG=1: the caller makes the call, a watchdog enforces the
// deadline by ending the job: `direct_ms`, `direct_ratio_vs_mpi`). The
// three are timed alternately, rep by rep, so load from elsewhere hits all
// alike. JSON lines on rank 0:
//   mpirun -np 4 bazel-bin/bench/collectives_bench [max_elems=16M]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/bench_clock.h"
#include "core/comm/mpi_communicator.h"

namespace {

using zero::bench::WallSeconds;

// Median times of `reps` runs of a, b and c, alternating, all ranks
// synchronized before each; a run's time is the slowest rank's. The order
// rotates rep by rep: the default communicator's worker spins ~100 us
// after each call, which would otherwise always land on the one after it.
struct Times {
  double ours, direct, raw;
};
template <typename A, typename B, typename C>
Times Time(A a, B b, C c, int reps) {
  std::vector<double> v[3];
  for (int i = 0; i < reps + 2; ++i) {
    for (int k = 0; k < 3; ++k) {
      const int which = (i + k) % 3;
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = WallSeconds();
      if (which == 0) {
        a();
      } else if (which == 1) {
        b();
      } else {
        c();
      }
      double dt = WallSeconds() - t0;
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (i >= 2) v[which].push_back(dt);
    }
  }
  for (auto& x : v) std::sort(x.begin(), x.end());
  return {v[0][v[0].size() / 2], v[1][v[1].size() / 2], v[2][v[2].size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  unsetenv("ZERO_MPI_WATCHDOG");
  auto comm = zero::MakeMpiCommunicator(nullptr);
  if (!comm.ok()) return 1;
  setenv("ZERO_MPI_WATCHDOG", "1", 1);
  auto direct = zero::MakeMpiCommunicator(nullptr);
  if (!direct.ok()) return 1;
  zero::Communicator* c = comm->get();
  zero::Communicator* dc = direct->get();
  const int W = c->world_size(), rank = c->rank();
  const int64_t max_elems = argc > 1 ? static_cast<int64_t>(std::atof(argv[1])) : 1 << 24;
  for (int64_t total = 1 << 10; total <= max_elems; total *= 4) {
    const int64_t per_rank = total / W;
    const int64_t n = per_rank * W;
    std::vector<float> send(n, 1.0f), recv(n, 0.0f), shard(per_rank);
    std::vector<int64_t> counts(W, per_rank);
    const int reps = n >= (1 << 22) ? 5 : n >= (1 << 18) ? 15 : 50;
    const Times ag = Time(
        [&] { (void)c->AllGatherV(send.data() + rank * per_rank, recv.data(), counts, zero::DType::kF32); },
        [&] { (void)dc->AllGatherV(send.data() + rank * per_rank, recv.data(), counts, zero::DType::kF32); },
        [&] { MPI_Allgather(send.data() + rank * per_rank, per_rank, MPI_FLOAT, recv.data(), per_rank, MPI_FLOAT, MPI_COMM_WORLD); },
        reps);
    const Times rs = Time(
        [&] { (void)c->ReduceScatterV(send.data(), shard.data(), counts); },
        [&] { (void)dc->ReduceScatterV(send.data(), shard.data(), counts); },
        [&] { MPI_Reduce_scatter_block(send.data(), shard.data(), per_rank, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
        reps);
    const Times ar = Time(
        [&] { (void)c->AllReduce(recv.data(), n, zero::ReduceOp::kSum); },
        [&] { (void)dc->AllReduce(recv.data(), n, zero::ReduceOp::kSum); },
        [&] { MPI_Allreduce(MPI_IN_PLACE, recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
        reps);
    const Times bc = Time(
        [&] { (void)c->Broadcast(recv.data(), n * 4, 0); },
        [&] { (void)dc->Broadcast(recv.data(), n * 4, 0); },
        [&] { MPI_Bcast(recv.data(), n * 4, MPI_BYTE, 0, MPI_COMM_WORLD); }, reps);
    if (rank == 0) {
      const double bytes = 4.0 * n * (W - 1) / W;  // per rank, ZeRO accounting
      auto line = [&](const char* op, const Times& t, double b) {
        std::printf("{\"bench\": \"collective\", \"op\": \"%s\", \"world\": %d, \"elems\": %lld, "
                    "\"ours_ms\": %.4f, \"direct_ms\": %.4f, \"mpi_ms\": %.4f, \"ours_GBps\": %.3f, "
                    "\"mpi_GBps\": %.3f, \"ratio_vs_mpi\": %.3f, \"over_mpi_us\": %.1f, "
                    "\"direct_ratio_vs_mpi\": %.3f, \"direct_over_mpi_us\": %.1f}\n",
                    op, W, static_cast<long long>(n), t.ours * 1e3, t.direct * 1e3, t.raw * 1e3,
                    b / t.ours / 1e9, b / t.raw / 1e9, t.raw / t.ours, (t.ours - t.raw) * 1e6,
                    t.raw / t.direct, (t.direct - t.raw) * 1e6);
      };
      line("all_gather", ag, bytes);
      line("reduce_scatter", rs, bytes);
      line("all_reduce", ar, 2 * bytes);
      line("broadcast", bc, 4.0 * n);
      std::fflush(stdout);
    }
  }
  return 0;
}
