// ckpt_crash_helper DIR: saves tag A, then starts saving tag B and SIGKILLs
// itself half-way through its rank file (the crash ckpt_test expects).
#include <csignal>
#include <cstdio>

#include "core/comm/thread_communicator.h"
#include "tests/testing/mlp_harness.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  zero::Config c;
  c.stage = 2;
  c.steps_per_print = 0;
  auto comms = zero::MakeThreadCommunicators(1);
  zero::testing::MlpSpec spec;
  auto e = zero::testing::MakeMlpEngine(c, comms[0].get(), spec);
  if (!e.ok()) return 3;
  if (!(*e)->Save(argv[1], "A").ok()) return 4;
  zero::ckpt::SaveOptions o;
  o.progress = [](int64_t done, int64_t total) {
    if (done * 2 >= total) raise(SIGKILL);
    return true;
  };
  absl::Status s = (*e)->Save(argv[1], "B", o);
  std::fprintf(stderr, "ckpt_crash_helper: save B returned: %s\n", s.ToString().c_str());
  return 5;
}
