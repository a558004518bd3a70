// offload_optimizer.delayed_update under mpirun (//tests:delayed_update_mpi_np2):
// the test MLP on the guarded stand-in device over the MPI communicator
// (staged through host buffers) and on the CPU device, stages 1-3, fp32 and fp16 with an overflow
// on the last rank, against the double reference that applies each update
// one step late (tests/testing/mlp_harness.h), which is far from exact
// mode's. Exit 0 on success; a failure prints it and exits 1.
#include <cstdio>
#include <memory>
#include <string>

#include "core/comm/mpi_communicator.h"
#include "core/device/guarded_device.h"
#include "tests/testing/mlp_harness.h"

int main() {
  auto comm = zero::MakeMpiCommunicator(nullptr);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  const int rank = (*comm)->rank(), world = (*comm)->world_size();
  int failed = 0;
  for (int run = 0; run < 4 && !failed; ++run) {
    const bool on_cpu = run >= 2;
    const zero::DType t = run % 2 == 0 ? zero::DType::kF32 : zero::DType::kF16;
    for (int stage : {1, 2, 3}) {
      zero::Config c = zero::testing::SmallMlpConfig(stage, t);
      c.comm_timeout_seconds = 60;
      c.offload_optimizer.device = zero::OffloadDevice::kCpu;
      c.offload_optimizer.delayed_update = true;
      zero::testing::MlpSpec spec;
      spec.steps = 8;
      if (!on_cpu) {
        spec.make_device = [] { return std::unique_ptr<zero::Device>(zero::MakeGuardedDevice()); };
      }
      if (t == zero::DType::kF16) {
        spec.inf_step = 3;
        spec.inf_rank = world - 1;
      }
      const double tol = t == zero::DType::kF32 ? 1e-5 : 2e-3;
      auto r = zero::testing::TrainMlp(c, comm->get(), spec);
      const zero::testing::MlpResult ref = zero::testing::TrainMlpReference(c, spec);
      zero::Config exact = c;
      exact.offload_optimizer.delayed_update = false;
      const double apart =
          zero::testing::MaxRelDiff(zero::testing::TrainMlpReference(exact, spec), ref);
      std::string err;
      if (!r.ok()) {
        err = r.status().ToString();
      } else if (zero::testing::MaxRelDiff(*r, ref) > tol) {
        err = "off the one-step-late reference by " +
              std::to_string(zero::testing::MaxRelDiff(*r, ref));
      } else if (apart < 10 * tol) {
        err = "the reference cannot tell delayed from exact";
      } else if (spec.inf_step >= 0 && !r->steps[spec.inf_step].skipped) {
        err = "the overflow step was not skipped";
      }
      if (!err.empty()) {
        std::fprintf(stderr, "rank %d %s stage %d %s: %s\n", rank,
                     on_cpu ? "cpu" : "stand-in", stage, zero::DTypeName(t), err.c_str());
        failed = 1;
        break;
      }
    }
  }
  if (rank == 0 && !failed) {
    std::printf("delayed_update: %d ranks, stages 1-3, stand-in and cpu\n", world);
  }
  return failed;
}
