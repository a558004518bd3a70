// A small "mixture of experts" trained through the C++ engine where each
// rank may do something else (skip a param or a module, run fewer steps or
// an extra micro-step, save alone): the divergence tests, their mpirun twin
// and the fuzz target share it. Every outcome is either training that ends
// alike on every rank or an error on every rank, within seconds.
#ifndef ZERO_TESTS_TESTING_DIVERGENT_RUN_H_
#define ZERO_TESTS_TESTING_DIVERGENT_RUN_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/comm/communicator.h"
#include "core/config/config.h"

namespace zero {
namespace testing {

// Params: shared.weight (13), experts.0-2.weight (10 each, one shape, so a
// rank that takes another expert sends as many elements), head.bias (7).
inline constexpr int kDivergentParams = 5;
const char* DivergentParamName(int p);

struct DivergentPlan {
  int steps = 3;  // optimizer steps, unless steps_of says otherwise
  // Per rank: optimizer steps taken (null: `steps`).
  std::function<int(int rank)> steps_of;
  // Whether `rank` uses param p at (step, micro) (null: every param). A
  // param not used is neither gathered nor handed a gradient.
  std::function<bool(int rank, int step, int micro, int p)> uses;
  // Whether `rank` uses p but hands in a zero gradient for it (the
  // reference of a skipped param; null: never).
  std::function<bool(int rank, int step, int micro, int p)> zero_grad;
  // Extra micro-steps `rank` runs at `step` beyond the accumulation (null: 0).
  std::function<int(int rank, int step)> extra_micros;
  // After training, whether `rank` saves a checkpoint to save_dir (null:
  // no rank does).
  std::function<bool(int rank)> saves;
  std::string save_dir;
  // After training, whether `rank` reads every param back with read_master
  // (a state_dict; null: no rank does).
  std::function<bool(int rank)> reads_state;
};

struct DivergentOutcome {
  absl::Status status;  // the first error, or OK
  double seconds = 0;   // from the first step to the end (or the error)
  std::vector<std::vector<float>> params;  // master fp32 (OK runs)
  std::string flight_record;                // the engine's, at the end
};

// The config the cases use: stage `stage`, fp32, Adam, tiny buckets, every
// stage-3 param gathered (no persistence), a 60 s timeout (never reached:
// the tests assert seconds).
Config DivergentConfig(int stage, int gas);


// Collective: every rank runs its part of `plan`.
DivergentOutcome RunDivergent(const Config& config, int rank, Communicator* comm,
                              const DivergentPlan& plan);

// One case of the suite: what each rank does, and what must come of it.
struct DivergentCase {
  std::string name;
  int gas = 1;  // gradient_accumulation_steps
  bool ignore_unused_parameters = true;
  DivergentPlan plan;
  // True: it trains, and each rank's params equal (bit for bit) those of
  // `reference` on that rank; false: every rank fails within 2.5 s with a
  // message holding each of `message`.
  bool trains = false;
  DivergentPlan reference;
  std::vector<std::string> message;
  // The difference is found by a check of its own that every rank passes
  // (stage 1's unused params), not at a collective whose signatures differ:
  // no flight record entry is "diverged".
  bool checked_at_boundary = false;
};

// The cases at `stage` over `world` ranks (checkpoints go under save_dir):
// a skipped expert (trains at stages 0-2; with ignore_unused_parameters
// false an error at stages 0 and 2), a different branch per rank, fewer
// steps then a save,
// an extra micro-step then a save, a save on rank 0 only, a state read on
// rank 0 only (stages 1-3: read_master is local at stage 0).
std::vector<DivergentCase> DivergentCases(int stage, int world, const std::string& save_dir);

inline Config DivergentConfig(int stage, const DivergentCase& c) {
  Config config = DivergentConfig(stage, c.gas);
  config.ignore_unused_parameters = c.ignore_unused_parameters;
  return config;
}

// "" when this rank's outcome meets the case (`ref`: this rank's outcome of
// the reference, for a case that trains), else what does not.
std::string CheckDivergentRank(const DivergentCase& c, int rank, const DivergentOutcome& got,
                               const DivergentOutcome* ref);

// Every rank's outcome over a thread communicator group of `world`.
std::vector<DivergentOutcome> RunDivergentOnThreads(const Config& config, int world,
                                                    const DivergentPlan& plan);

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_DIVERGENT_RUN_H_
