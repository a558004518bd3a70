// Our communicator's all-gather / reduce-scatter / all-reduce / broadcast
// against the raw blocking MPI calls of the same sizes, in the same run, at
// 8 sizes from 1K to 16M elements (total per collective). The two are timed
// alternately, rep by rep, so load from elsewhere hits both alike. JSON lines
// on rank 0:
//   mpirun -np 4 bazel-bin/bench/collectives_bench [max_elems=16M]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/comm/mpi_communicator.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median times of `reps` runs of a and of b, alternating, all ranks
// synchronized before each; a run's time is the slowest rank's.
template <typename A, typename B>
void Time(A a, B b, int reps, double* ta, double* tb) {
  std::vector<double> va, vb;
  for (int i = 0; i < reps + 2; ++i) {
    for (int which = 0; which < 2; ++which) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = Now();
      if (which == 0) {
        a();
      } else {
        b();
      }
      double dt = Now() - t0;
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (i >= 2) (which == 0 ? va : vb).push_back(dt);
    }
  }
  std::sort(va.begin(), va.end());
  std::sort(vb.begin(), vb.end());
  *ta = va[va.size() / 2];
  *tb = vb[vb.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  auto comm = zero::MakeMpiCommunicator(nullptr);
  if (!comm.ok()) return 1;
  zero::Communicator* c = comm->get();
  const int W = c->world_size(), rank = c->rank();
  const int64_t max_elems = argc > 1 ? static_cast<int64_t>(std::atof(argv[1])) : 1 << 24;
  for (int64_t total = 1 << 10; total <= max_elems; total *= 4) {
    const int64_t per_rank = total / W;
    const int64_t n = per_rank * W;
    std::vector<float> send(n, 1.0f), recv(n, 0.0f), shard(per_rank);
    std::vector<int64_t> counts(W, per_rank);
    const int reps = n >= (1 << 22) ? 5 : n >= (1 << 18) ? 15 : 50;
    double ours_ag, raw_ag, ours_rs, raw_rs, ours_ar, raw_ar, ours_bc, raw_bc;
    Time([&] { (void)c->AllGatherV(send.data() + rank * per_rank, recv.data(), counts, zero::DType::kF32); },
         [&] { MPI_Allgather(send.data() + rank * per_rank, per_rank, MPI_FLOAT, recv.data(), per_rank, MPI_FLOAT, MPI_COMM_WORLD); },
         reps, &ours_ag, &raw_ag);
    Time([&] { (void)c->ReduceScatterV(send.data(), shard.data(), counts); },
         [&] { MPI_Reduce_scatter_block(send.data(), shard.data(), per_rank, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         reps, &ours_rs, &raw_rs);
    Time([&] { (void)c->AllReduce(recv.data(), n, zero::ReduceOp::kSum); },
         [&] { MPI_Allreduce(MPI_IN_PLACE, recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         reps, &ours_ar, &raw_ar);
    Time([&] { (void)c->Broadcast(recv.data(), n * 4, 0); },
         [&] { MPI_Bcast(recv.data(), n * 4, MPI_BYTE, 0, MPI_COMM_WORLD); }, reps, &ours_bc,
         &raw_bc);
    if (rank == 0) {
      const double bytes = 4.0 * n * (W - 1) / W;  // per rank, ZeRO accounting
      auto line = [&](const char* op, double ours, double raw, double b) {
        std::printf("{\"bench\": \"collective\", \"op\": \"%s\", \"world\": %d, \"elems\": %lld, "
                    "\"ours_ms\": %.4f, \"mpi_ms\": %.4f, \"ours_GBps\": %.3f, \"mpi_GBps\": %.3f, "
                    "\"ratio_vs_mpi\": %.3f, \"over_mpi_us\": %.1f}\n",
                    op, W, static_cast<long long>(n), ours * 1e3, raw * 1e3, b / ours / 1e9,
                    b / raw / 1e9, raw / ours, (ours - raw) * 1e6);
      };
      line("all_gather", ours_ag, raw_ag, bytes);
      line("reduce_scatter", ours_rs, raw_rs, bytes);
      line("all_reduce", ours_ar, raw_ar, 2 * bytes);
      line("broadcast", ours_bc, raw_bc, 4.0 * n);
      std::fflush(stdout);
    }
  }
  return 0;
}
