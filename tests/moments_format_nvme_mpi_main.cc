// 8-bit moments in the NVMe optimizer tier under mpirun
// (//tests:moments_format_nvme_mpi_np{2,3}): the test MLP over the MPI
// communicator at stages 1-3, fp32 and bf16, with optimizer.moments_format
// "8bit" and offload_optimizer "nvme", bit for bit the same run with the
// state in memory (params and every step's norm), and for fp32 within the
// 8-bit tolerance of the double reference rounding the moments as stored
// (docs/ARCHITECTURE.md, "Optimizer state formats"). Exit 0 on success; a
// failure prints it and exits 1.
#include <cstdio>
#include <string>

#include "core/comm/mpi_communicator.h"
#include "tests/testing/fresh_dir.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

// Empty when equal bit for bit; else the first difference.
std::string Difference(const MlpResult& a, const MlpResult& b) {
  if (a.params.size() != b.params.size() || a.steps.size() != b.steps.size()) {
    return "different numbers of params or steps";
  }
  for (size_t i = 0; i < a.params.size(); ++i) {
    if (a.params[i] != b.params[i]) return "param " + a.names[i] + " differs";
  }
  for (size_t s = 0; s < a.steps.size(); ++s) {
    if (a.steps[s].grad_norm != b.steps[s].grad_norm) {
      return "step " + std::to_string(s) + "'s norm differs";
    }
  }
  return "";
}

int Run(Communicator* comm) {
  const int rank = comm->rank(), world = comm->world_size();
  int failed = 0;
  for (int stage = 1; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      Config c = SmallMlpConfig(stage, t);
      c.comm_timeout_seconds = 60;
      c.sub_group_size = 128;  // several groups and NVMe chunks
      c.moments_format = MomentsFormat::kQ8;
      Config nvme = c;
      nvme.offload_optimizer.device = OffloadDevice::kNvme;
      nvme.offload_optimizer.nvme_path = FreshDir("q8_nvme_mpi_r" + std::to_string(rank) + "_");
      nvme.offload_optimizer.buffer_count = 3;
      MlpSpec spec;
      auto mem = TrainMlp(c, comm, spec);
      auto got = TrainMlp(nvme, comm, spec);
      std::string err;
      if (!mem.ok() || !got.ok()) {
        err = (mem.ok() ? got.status() : mem.status()).ToString();
      } else {
        err = Difference(*got, *mem);
        const double d = MaxRelDiff(*got, TrainMlpReference(c, spec));
        if (err.empty() && t == DType::kF32 && d > 2e-4) {
          err = "off the double reference by " + std::to_string(d);
        }
        if (err.empty() && got->stats.nvme_bytes <= 0) err = "no NVMe files";
        if (rank == 0 && t == DType::kF32) {
          std::printf("8bit nvme stage %d world %d: bitwise the in-memory run, %.3g from the "
                      "double reference\n", stage, world, d);
        }
      }
      if (!err.empty()) {
        std::fprintf(stderr, "rank %d stage %d %s: %s\n", rank, stage, DTypeName(t),
                     err.c_str());
        failed = 1;
      }
    }
  }
  return failed;
}

}  // namespace
}  // namespace testing
}  // namespace zero

int main() {
  auto comm = zero::MakeMpiCommunicator(nullptr);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  return zero::testing::Run(comm->get());
}
