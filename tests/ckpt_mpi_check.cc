// ckpt_mpi_check save|load DIR, under mpirun (tests/ckpt_mpi_test.sh):
//   save: trains the test MLP at stage 3 for 10 steps, saving after 5, and
//         writes the final params (rank 0) to DIR/expected.bin;
//   load: resumes from DIR at stage 1 on however many ranks it runs, trains
//         to step 10 and checks the params against DIR/expected.bin.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/comm/mpi_communicator.h"
#include "tests/testing/mlp_harness.h"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string mode = argv[1], dir = argv[2];
  auto comm = zero::MakeMpiCommunicator(nullptr);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  const int rank = (*comm)->rank(), world = (*comm)->world_size();
  zero::Config c;
  c.lr = 1e-2;
  c.weight_decay = 0.01;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 60;
  c.reduce_bucket_size = 100;
  c.stage3_param_persistence_threshold = 10;
  zero::testing::MlpSpec spec;
  spec.ckpt_dir = dir;
  if (mode == "save") {
    c.stage = 3;
    spec.save_after = 5;
  } else {
    c.stage = 1;
    spec.resume_dir = dir;
    spec.resume_tag = "mid";
  }
  auto r = zero::testing::TrainMlp(c, comm->get(), spec);
  if (!r.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, r.status().ToString().c_str());
    return 1;
  }
  if (mode == "save") {
    if (rank == 0) {
      std::ofstream f(dir + "/expected.bin", std::ios::binary);
      for (const auto& p : r->params) f.write(reinterpret_cast<const char*>(p.data()), p.size() * 4);
    }
    std::printf("rank %d/%d: saved %s/mid at step 5 (stage 3)\n", rank, world, dir.c_str());
    return 0;
  }
  zero::testing::MlpResult want = *r;
  std::ifstream f(dir + "/expected.bin", std::ios::binary);
  for (auto& p : want.params) f.read(reinterpret_cast<char*>(p.data()), p.size() * 4);
  if (!f) {
    std::fprintf(stderr, "rank %d: cannot read %s/expected.bin\n", rank, dir.c_str());
    return 1;
  }
  const double d = zero::testing::MaxRelDiff(*r, want);
  std::printf("rank %d/%d: resumed at stage 1, max rel diff %.3g vs the uninterrupted run\n",
              rank, world, d);
  return d <= 1e-6 ? 0 : 1;
}
