// ckpt_crash_helper DIR: saves tag A, then starts saving tag B and SIGKILLs
// itself half-way through its rank file (the crash ckpt_test expects).
// ckpt_crash_helper DIR --fault-b SPEC: saves A, arms the IO faults SPEC
// (core/common/io_fault.h; "fsync:2:crash" dies before the second fsync)
// and saves B; exits 0 when B was saved (the fault never fired), 6 when the
// save failed (io_fault_test).
// ckpt_crash_helper DIR --async-fault-b SPEC: the same with B saved
// asynchronously (keep_last 1): the faults hit the background write, the
// publish of latest and the deletion of A.
#include <csignal>
#include <cstdio>

#include <string>

#include "core/comm/thread_communicator.h"
#include "core/common/io_fault.h"
#include "tests/testing/mlp_harness.h"

int main(int argc, char** argv) {
  const bool async_b = argc == 4 && std::string(argv[2]) == "--async-fault-b";
  const bool fault_b = argc == 4 && (std::string(argv[2]) == "--fault-b" || async_b);
  if (argc != 2 && !fault_b) return 2;
  zero::Config c;
  c.stage = 2;
  c.steps_per_print = 0;
  auto comms = zero::MakeThreadCommunicators(1);
  zero::testing::MlpSpec spec;
  auto e = zero::testing::MakeMlpEngine(c, comms[0].get(), spec);
  if (!e.ok()) return 3;
  if (!(*e)->Save(argv[1], "A").ok()) return 4;
  if (fault_b) {
    if (!zero::io::SetIoFaults(argv[3]).ok()) return 7;
    zero::ckpt::SaveOptions o;
    o.async = async_b;
    o.keep_last = async_b ? 1 : 0;
    absl::Status s = (*e)->Save(argv[1], "B", o);
    if (s.ok()) s = (*e)->WaitForCheckpoint();
    if (!s.ok()) std::fprintf(stderr, "ckpt_crash_helper: save B: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 6;
  }
  zero::ckpt::SaveOptions o;
  o.progress = [](int64_t done, int64_t total) {
    if (done * 2 >= total) raise(SIGKILL);
    return true;
  };
  absl::Status s = (*e)->Save(argv[1], "B", o);
  std::fprintf(stderr, "ckpt_crash_helper: save B returned: %s\n", s.ToString().c_str());
  return 5;
}
