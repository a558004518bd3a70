// The divergence cases of divergence_test (tests/testing/divergent_run.h)
// under mpirun, at stages 0-3: each rank checks its own outcome; the job
// fails if any rank's does not meet its case. Nothing may abort inside MPI
// or corrupt memory on the way (the ASan run covers this binary too).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/comm/mpi_communicator.h"
#include "tests/testing/divergent_run.h"

int main() {
  using namespace zero;
  using namespace zero::testing;
  auto comm = MakeMpiCommunicator(nullptr);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  Communicator* c = comm->get();
  c->set_timeout_seconds(120);
  const char* tmp = std::getenv("TEST_TMPDIR");
  double failed = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    const std::string dir = std::string(tmp ? tmp : "/tmp") + "/mpi_s" + std::to_string(stage);
    for (const DivergentCase& k : DivergentCases(stage, c->world_size(), dir)) {
      const Config config = DivergentConfig(stage, k);
      DivergentOutcome got = RunDivergent(config, c->rank(), c, k.plan);
      DivergentOutcome ref;
      if (k.trains) ref = RunDivergent(config, c->rank(), c, k.reference);
      const std::string bad = CheckDivergentRank(k, c->rank(), got, k.trains ? &ref : nullptr);
      std::printf("stage %d %s rank %d: %s (%.3f s)\n", stage, k.name.c_str(), c->rank(),
                  bad.empty() ? "ok" : bad.c_str(), got.seconds);
      if (!bad.empty()) failed = 1;
    }
  }
  std::fflush(stdout);
  if (!c->AllReduce(&failed, 1, ReduceOp::kMax).ok()) return 1;
  return failed > 0 ? 1 : 0;
}
