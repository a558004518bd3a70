// zero_engine_gather_into_many / zero_engine_release_many (1.15) under
// mpirun: a block per call bit for bit one call per param, fp32 and bf16,
// and the refusals on every rank alike (gather_many_check.h), on the MPI
// communicator through the C ABI. Exit 0 on success; a failure prints it
// and exits 1.
#include <cstdio>
#include <string>

#include "tests/gather_many_check.h"
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
  // Both engines duplicate the communicator: their collectives never mix.
  std::string err = gather_many_check::SideBySide(comm, comm, ZERO_DTYPE_F32, rank, 3);
  if (err.empty()) err = gather_many_check::SideBySide(comm, comm, ZERO_DTYPE_BF16, rank, 3);
  if (err.empty()) err = gather_many_check::Refusals(comm);
  if (!err.empty()) std::fprintf(stderr, "rank %d: %s\n", rank, err.c_str());
  if (rank == 0 && err.empty()) std::printf("gather_into_many: %d ranks, bit for bit\n", world);
  zero_comm_destroy(comm);
  return err.empty() ? 0 : 1;
}
