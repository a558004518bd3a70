// Our communicator's all-gather / reduce-scatter / all-reduce against the raw
// blocking MPI calls of the same sizes, in the same run. JSON lines on rank 0:
//   mpirun -np 4 bazel-bin/bench/collectives_bench
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/comm/mpi_communicator.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median time of `reps` runs of fn, all ranks synchronized before each.
template <typename F>
double Time(F fn, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = Now();
    fn();
    double dt = Now() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= 2) t.push_back(dt);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  auto comm = zero::MakeMpiCommunicator(nullptr);
  if (!comm.ok()) return 1;
  zero::Communicator* c = comm->get();
  const int W = c->world_size(), rank = c->rank();
  for (int64_t per_rank : {1 << 12, 1 << 16, 1 << 20, 1 << 22}) {
    const int64_t n = per_rank * W;
    std::vector<float> send(n, 1.0f), recv(n, 0.0f), shard(per_rank);
    std::vector<int64_t> counts(W, per_rank);
    const int reps = per_rank >= (1 << 20) ? 5 : 20;
    double ours_ag = Time([&] { (void)c->AllGatherV(send.data() + rank * per_rank, recv.data(), counts, zero::DType::kF32); }, reps);
    double raw_ag = Time([&] { MPI_Allgather(send.data() + rank * per_rank, per_rank, MPI_FLOAT, recv.data(), per_rank, MPI_FLOAT, MPI_COMM_WORLD); }, reps);
    double ours_rs = Time([&] { (void)c->ReduceScatterV(send.data(), shard.data(), counts); }, reps);
    double raw_rs = Time([&] { MPI_Reduce_scatter_block(send.data(), shard.data(), per_rank, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }, reps);
    double ours_ar = Time([&] { (void)c->AllReduce(recv.data(), n, zero::ReduceOp::kSum); }, reps);
    double raw_ar = Time([&] { MPI_Allreduce(MPI_IN_PLACE, recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }, reps);
    if (rank == 0) {
      const double bytes = 4.0 * n * (W - 1) / W;  // per rank, ZeRO accounting
      auto line = [&](const char* op, double ours, double raw, double b) {
        std::printf("{\"bench\": \"collective\", \"op\": \"%s\", \"world\": %d, \"elems\": %lld, "
                    "\"ours_ms\": %.3f, \"mpi_ms\": %.3f, \"ours_GBps\": %.3f, \"mpi_GBps\": %.3f, "
                    "\"ratio_vs_mpi\": %.3f}\n",
                    op, W, static_cast<long long>(n), ours * 1e3, raw * 1e3, b / ours / 1e9,
                    b / raw / 1e9, raw / ours);
      };
      line("all_gather", ours_ag, raw_ag, bytes);
      line("reduce_scatter", ours_rs, raw_rs, bytes);
      line("all_reduce", ours_ar, raw_ar, 2 * bytes);
      std::fflush(stdout);
    }
  }
  return 0;
}
