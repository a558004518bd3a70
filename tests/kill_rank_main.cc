// One rank of a training job in which one rank is SIGKILLed at a precise
// point (run by tests/kill_rank_test.sh under mpirun -np 4):
//
//   --scenario backward  rank K dies mid-backward of step T (after the
//                        GradReady of fc2.weight: buckets are in flight)
//   --scenario save      rank K dies half-way through writing its rank file
//                        of the checkpoint saved before step T
//   --scenario nvme      (offload_optimizer nvme) rank K dies inside the
//                        optimizer step of step T, before its second write
//                        to its optimizer-state files (an injected crash)
//   --scenario none      no one dies (the reference, and the resumed run)
//   --scenario sigterm   (with --preempt) rank K raises SIGTERM on itself
//                        mid-backward of step T: every rank must finish
//                        the step, save global_step<T+1> and exit 143
//
// --async saves asynchronously (with --keep-last N). --fail-save-step N:
// rank K's rank file of tag stepN fails to write (ENOSPC, in the
// background); the next save returns that failure on every rank, which
// writes it to RUN/reported.R and saves again. --preempt watches SIGTERM
// (zero_engine_set_preemption semantics: save to --ckpt and exit).
// --step-sleep S sleeps S seconds at each step's start and writes the step
// to RUN/step.R (a test's external kill lands mid-run).
//
// --accum-read count|N:EIO (with --stage 3 --gas 2 --nvme): rank K aims an
// injected fault at its first gradient-accumulation read of step T
// (tests/testing/aiming_device.h): "count" writes that read's N to
// RUN/accum_reads (and trains through), "N:EIO" fails it.
//
// Every rank trains the MLP of tests/testing/mlp_harness at `--stage`, saves
// DIR/stepN before step N when N is a multiple of --save-every, and with
// --resume first loads DIR/latest. The killed rank writes RUN/killed (its
// rank, the point, the wall time) just before raise(SIGKILL); every rank
// writes RUN/pid.R at start. A survivor whose training fails prints zero's
// error, writes RUN/error.R and aborts the job (Communicator::Abort), as
// docs/ARCHITECTURE.md ("Failures") asks of a rank that gives up. Rank 0 of
// a job that finishes writes every param's fp32 master to --dump.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "core/comm/mpi_communicator.h"
#include "core/common/io_fault.h"
#include "tests/testing/aiming_device.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

struct Args {
  std::string scenario = "none";
  int stage = 2;
  int steps = 10;
  int save_every = 3;
  int kill_rank = 1;
  int kill_step = 5;
  double timeout = 4;
  std::string ckpt, nvme, run, dump;
  bool resume = false;
  int gas = 1;
  std::string accum_read;
  bool async = false, preempt = false;
  int keep_last = 0, fail_save_step = -1;
  double step_sleep = 0;
};

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.flush();
}

// RUN/killed: the rank, the point and the wall time of its death.
void RecordDeath(const Args& a, int rank, const char* point) {
  char line[160];
  std::snprintf(line, sizeof(line), "%d %s %.6f\n", rank, point, WallSeconds());
  WriteFile(a.run + "/killed", line);
}

// Records the moment of death, then dies without a word to anyone.
[[noreturn]] void Die(const Args& a, int rank, const char* point) {
  RecordDeath(a, rank, point);
  raise(SIGKILL);
  std::_Exit(99);  // not reached
}

int Run(const Args& a) {
  auto comm_or = MakeMpiCommunicator(nullptr);
  if (!comm_or.ok()) {
    std::fprintf(stderr, "%s\n", comm_or.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<Communicator> comm = std::move(*comm_or);
  const int rank = comm->rank();
  comm->set_timeout_seconds(a.timeout);
  WriteFile(a.run + "/pid." + std::to_string(rank), std::to_string(getpid()) + "\n");

  Config c = SmallMlpConfig(a.stage, DType::kF32);
  c.comm_timeout_seconds = a.timeout;
  MlpSpec spec;
  spec.steps = a.steps;
  if (a.scenario == "nvme" || !a.nvme.empty()) {
    // Enough state that a step writes for a while, in several sub-groups.
    spec.hidden = 4000;
    c.reduce_bucket_size = 20000;
    c.sub_group_size = 8192;
    c.offload_optimizer.device = OffloadDevice::kNvme;
    c.offload_optimizer.nvme_path = a.nvme + "/rank" + std::to_string(rank);
    c.offload_optimizer.buffer_count = 2;
    mkdir(c.offload_optimizer.nvme_path.c_str(), 0755);
  }
  // --resume loads DIR/latest when there is one (a job restarted by
  // zero-launch --max_restarts starts with the same flags as the first).
  struct stat latest_st;
  if (a.resume && stat((a.ckpt + "/latest").c_str(), &latest_st) == 0) spec.resume_dir = a.ckpt;
  c.gradient_accumulation_steps = a.gas;
  // --accum-read: the target's first accumulation read of step kill_step.
  const bool aim = !a.accum_read.empty() && rank == a.kill_rank;
  std::atomic<bool> micro1{false};
  int seen_last = 0;
  int64_t accums = 0, reads_to_accum = -1;
  if (aim) {
    spec.make_device = [&]() -> std::unique_ptr<Device> {
      return std::make_unique<AimingDevice>([&] {
        if (!micro1.load()) return;
        if (accums++ == 0) reads_to_accum = io::IoFaultMatches();
        if (a.accum_read != "count") {
          std::fprintf(stderr, "kill_rank_main: rank %d added a sum in micro-step 2 of step %d: "
                       "the aimed read passed\n", rank, a.kill_step);
        }
      });
    };
  }

  bool preempt_set = false;
  spec.hook = [&](Engine* e, int step, int index) -> absl::Status {
    const bool victim = rank == a.kill_rank && step == a.kill_step;
    if (aim && step == a.kill_step) {
      // fc2.bias (index 4) comes first in each micro-step's backward.
      if (index == 4 && ++seen_last == 2) micro1 = true;
      if (index == -1) {
        const std::string files = GradFilePrefix(c.offload_optimizer.nvme_path, rank);
        if (files.empty()) return absl::InternalError("no gradient file of this rank");
        const std::string n = a.accum_read == "count" ? "1000000000:EIO" : a.accum_read;
        absl::Status armed = io::SetIoFaults("read:" + n + ":" + files);
        if (!armed.ok()) return armed;
      }
    }
    if (a.preempt && index == -1 && !preempt_set) {
      preempt_set = true;
      PreemptionOptions po;
      po.dir = a.ckpt;
      absl::Status st = e->SetPreemption(&po);
      if (!st.ok()) return st;
    }
    if (index == -1 && a.step_sleep > 0) {
      WriteFile(a.run + "/step." + std::to_string(rank), std::to_string(step) + "\n");
      std::this_thread::sleep_for(std::chrono::duration<double>(a.step_sleep));
    }
    if (victim && a.scenario == "sigterm" && index == 3) raise(SIGTERM);
    if (index == -1 && step > 0 && step % a.save_every == 0) {
      // A load resumes after the save it loaded: do not save that one again.
      const std::string tag = "step" + std::to_string(step);
      struct stat st;
      if (a.resume && stat((a.ckpt + "/" + tag).c_str(), &st) == 0) return absl::OkStatus();
      ckpt::SaveOptions o;
      o.async = a.async;
      o.keep_last = a.keep_last;
      if (rank == a.kill_rank && step == a.fail_save_step) {
        absl::Status armed = io::SetIoFaults("write:1+:ENOSPC:." + tag + ".partial/rank_");
        if (!armed.ok()) return armed;
      }
      if (a.fail_save_step >= 0 && step > a.fail_save_step) {
        absl::Status s = e->Save(a.ckpt, tag, o);
        if (s.ok() || std::string(s.message()).find("background save of") == std::string::npos) {
          return s;
        }
        WriteFile(a.run + "/reported." + std::to_string(rank), s.ToString() + "\n");
        if (rank == a.kill_rank) (void)io::SetIoFaults("");
        // The failure was the previous save's: this one was not made.
      }
      if (victim && a.scenario == "save") {
        o.progress = [&a, rank](int64_t done, int64_t total) {
          if (done * 2 >= total) Die(a, rank, "save");
          return true;
        };
      }
      return e->Save(a.ckpt, tag, o);
    }
    if (!victim) return absl::OkStatus();
    if (a.scenario == "backward" && index == 3) Die(a, rank, "backward");
    if (a.scenario == "nvme" && index == 1) {
      // The last GradReady: Step() comes next. Die inside it, right before
      // the second write to this rank's optimizer-state files, by an IO
      // fault of the crash kind (core/common/io_fault.h): exact however
      // loaded the machine (a thread watching the files' mtime missed short
      // steps under load). The moment is recorded now, a little before the
      // death, so the time to exit measured from it errs long.
      RecordDeath(a, rank, "nvme");
      absl::Status armed =
          io::SetIoFaults("write:2:crash:" + c.offload_optimizer.nvme_path + "/");
      if (!armed.ok()) return armed;
    }
    if (a.scenario == "nvme" && index == -1 && step == a.kill_step + 1) {
      // The step finished without the fault firing: say so and die anyway
      // (the test then fails on the point).
      Die(a, rank, "after-nvme-step");
    }
    return absl::OkStatus();
  };

  const double t0 = WallSeconds();
  absl::StatusOr<MlpResult> r = TrainMlp(c, comm.get(), spec);
  if (!r.ok()) {
    const double t = WallSeconds();
    std::fprintf(stderr, "[rank %d] zero: %s (%.2f s into training)\n", rank,
                 r.status().ToString().c_str(), t - t0);
    char line[64];
    std::snprintf(line, sizeof(line), "%.6f\n", t);
    WriteFile(a.run + "/error." + std::to_string(rank), line);
    // Told by agreement that another rank failed (that rank is alive and
    // reports its own error, naming the file): give it up to 2 s to do so
    // before this abort kills it mid-report. Ranks stopped by a timeout
    // (a dead peer) abort at once.
    if (std::string(r.status().message()).find("another rank") != std::string::npos) {
      for (int i = 0; i < 200; ++i) {
        int reported = 0;
        for (int q = 0; q < comm->world_size(); ++q) {
          struct stat st;
          if (stat((a.run + "/error." + std::to_string(q)).c_str(), &st) == 0) ++reported;
        }
        if (reported == comm->world_size()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    comm->Abort("rank " + std::to_string(rank) + ": " + std::string(r.status().message()));
    return 1;
  }
  if (aim && a.accum_read == "count") {
    WriteFile(a.run + "/accum_reads", std::to_string(reads_to_accum) + "\n");
  }
  if (rank == 0 && !a.dump.empty()) {
    std::ofstream f(a.dump, std::ios::binary | std::ios::trunc);
    for (const auto& p : r->params) {
      f.write(reinterpret_cast<const char*>(p.data()), p.size() * sizeof(float));
    }
  }
  WriteFile(a.run + "/done." + std::to_string(rank), "\n");
  return 0;
}

}  // namespace
}  // namespace testing
}  // namespace zero

int main(int argc, char** argv) {
  zero::testing::Args a;
  // A restart by zero-launch (ZERO_LAUNCH_RESTART > 0) kills no one again.
  const char* restart = std::getenv("ZERO_LAUNCH_RESTART");
  const bool restarted = restart != nullptr && std::atoi(restart) > 0;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (k == "--resume") { a.resume = true; continue; }
    if (k == "--async") { a.async = true; continue; }
    if (k == "--preempt") { a.preempt = true; continue; }
    ++i;
    if (k == "--scenario") a.scenario = v;
    else if (k == "--stage") a.stage = std::atoi(v);
    else if (k == "--steps") a.steps = std::atoi(v);
    else if (k == "--save-every") a.save_every = std::atoi(v);
    else if (k == "--kill-rank") a.kill_rank = std::atoi(v);
    else if (k == "--kill-step") a.kill_step = std::atoi(v);
    else if (k == "--timeout") a.timeout = std::atof(v);
    else if (k == "--ckpt") a.ckpt = v;
    else if (k == "--nvme") a.nvme = v;
    else if (k == "--run") a.run = v;
    else if (k == "--dump") a.dump = v;
    else if (k == "--gas") a.gas = std::atoi(v);
    else if (k == "--accum-read") a.accum_read = v;
    else if (k == "--keep-last") a.keep_last = std::atoi(v);
    else if (k == "--fail-save-step") a.fail_save_step = std::atoi(v);
    else if (k == "--step-sleep") a.step_sleep = std::atof(v);
    else { std::fprintf(stderr, "kill_rank_main: unknown flag %s\n", k.c_str()); return 2; }
  }
  if (restarted) a.scenario = "none";
  if (a.ckpt.empty() || a.run.empty()) {
    std::fprintf(stderr, "kill_rank_main: --ckpt and --run are required\n");
    return 2;
  }
  return zero::testing::Run(a);
}
