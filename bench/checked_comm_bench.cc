// What checking every collective before its data moves costs
// (docs/ARCHITECTURE.md, "When ranks disagree"): the engine's MPI
// communicator with and without the CheckedCommunicator wrapper (its
// 128-byte signature all-gather before each call), all-reduce and
// reduce-scatter at sizes from 1K to 4M fp32 elements, timed alternately
// rep by rep. JSON lines on rank 0:
//   mpirun -np 2 bazel-bin/bench/checked_comm_bench
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "bench/bench_clock.h"
#include "core/comm/checked_communicator.h"
#include "core/comm/mpi_communicator.h"

namespace {

using zero::bench::WallSeconds;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  using namespace zero;
  auto plain = MakeMpiCommunicator(nullptr);
  auto inner = MakeMpiCommunicator(nullptr);
  if (!plain.ok() || !inner.ok()) return 1;
  auto monitor = std::make_shared<DivergenceMonitor>((*plain)->rank(), 256);
  std::unique_ptr<Communicator> checked = MakeCheckedCommunicator(std::move(*inner), monitor);
  Communicator* c[2] = {plain->get(), checked.get()};
  const int world = c[0]->world_size();
  for (int64_t n = 1024; n <= (int64_t{4} << 20); n *= 4) {
    std::vector<float> buf(n, 1.0f), out(n / world + 1);
    const int reps = n >= (int64_t{1} << 20) ? 20 : 200;
    for (int op = 0; op < 2; ++op) {
      std::vector<double> t[2];
      for (int i = 0; i < reps + 2; ++i) {
        for (int k = 0; k < 2; ++k) {
          const int which = (i + k) % 2;
          MPI_Barrier(MPI_COMM_WORLD);
          const double t0 = WallSeconds();
          absl::Status s = op == 0 ? c[which]->AllReduce(buf.data(), n, ReduceOp::kSum)
                                   : c[which]->ReduceScatterV(
                                         buf.data(), out.data(),
                                         std::vector<int64_t>(world, n / world));
          if (!s.ok()) return 1;
          double dt = WallSeconds() - t0;
          MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          if (i >= 2) t[which].push_back(dt);
        }
      }
      const double a = Median(t[0]) * 1e3, b = Median(t[1]) * 1e3;
      if (c[0]->rank() == 0) {
        std::printf("{\"op\": \"%s\", \"elems\": %lld, \"ranks\": %d, \"plain_ms\": %.4f, "
                    "\"checked_ms\": %.4f, \"extra_ms\": %.4f, \"ratio\": %.3f}\n",
                    op == 0 ? "all-reduce" : "reduce-scatter", static_cast<long long>(n), world,
                    a, b, b - a, b / a);
      }
    }
  }
  return 0;
}
