// zero_engine_gather_into (1.7; every stage since 1.8) under mpirun: every
// gathered param bit for bit what zero_engine_gather hands out
// (gather_into_check.h), stages 0-3, fp32/fp16/bf16, offload_param
// none/cpu/nvme, on the MPI communicator through the C
// ABI. Exit 0 on success; a failure prints it and exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/gather_into_check.h"
#include "zero_c.h"

int main() {
  zero_comm_t* comm = nullptr;
  if (zero_comm_create_mpi(nullptr, &comm) != ZERO_OK) {
    std::fprintf(stderr, "zero_comm_create_mpi: %s\n", zero_last_error());
    return 1;
  }
  int32_t rank = 0, world = 0;
  zero_comm_rank(comm, &rank);
  zero_comm_size(comm, &world);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/gather_into_mpi_" +
                          std::to_string(world);
  int failed = 0;
  struct Case {
    zero_dtype dtype;
    const char* offload;
    int stage;
  };
  for (const Case& c : {Case{ZERO_DTYPE_F32, "", 3}, Case{ZERO_DTYPE_F16, "", 3},
                        Case{ZERO_DTYPE_BF16, "", 3}, Case{ZERO_DTYPE_BF16, "cpu", 3},
                        Case{ZERO_DTYPE_F32, "nvme", 3}, Case{ZERO_DTYPE_BF16, "", 0},
                        Case{ZERO_DTYPE_F32, "", 1}, Case{ZERO_DTYPE_F16, "", 2}}) {
    // Both engines duplicate the communicator: their collectives never mix.
    const std::string err = gather_into_check::Run(
        comm, comm, c.dtype, c.offload,
        dir + "_" + std::to_string(c.dtype) + c.offload + std::to_string(c.stage), rank, 3, false,
        c.stage);
    if (!err.empty()) {
      std::fprintf(stderr, "rank %d stage %d dtype %d offload '%s': %s\n", rank, c.stage,
                   static_cast<int>(c.dtype), c.offload, err.c_str());
      failed = 1;
      break;  // the ranks' calls no longer match
    }
  }
  if (rank == 0 && !failed) std::printf("gather_into: %d ranks, bit for bit\n", world);
  zero_comm_destroy(comm);
  return failed;
}
