// Ranks that draw their own control flow (docs/ARCHITECTURE.md, "When
// ranks disagree"): the input picks a stage, a world of 2 or 3 thread
// ranks, an accumulation, and per rank which params it skips at which
// step, how many steps and extra micro-steps it runs; every rank then
// saves. Whatever the draw, the run never crashes, corrupts memory (the
// replay runs under ASan too) or waits out the 60 s timeout: either every
// rank trains and ends with the params of the run where the skipped params
// were handed in as zeros (bit for bit), or every rank fails within 2.5 s
// with the divergence error (ZERO_MISMATCH) or the engine's refusal after
// it. Anything else aborts. A libFuzzer entry point like the parsers'
// targets, replayed over its seed corpus by //tests/fuzz:divergence_replay_test
// (default build and ASan), and drawn at random for a time by tools/fuzz.sh
// run (//tests/fuzz:divergence_random under --config=asan: random inputs,
// not libFuzzer's coverage-guided ones, since fuzz.sh's clang build outside
// Bazel would need the whole CPU engine).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/common/errors.h"
#include "tests/testing/divergent_run.h"

namespace {

using zero::testing::DivergentOutcome;
using zero::testing::DivergentPlan;
using zero::testing::kDivergentParams;

struct Draw {
  int stage = 0, world = 2, gas = 1, steps = 1;
  // By rank: skipped (step, param) bits, steps taken, extra micro-steps at
  // step 0.
  std::vector<uint32_t> skips;
  std::vector<int> steps_of, extra;
};

Draw Decode(const uint8_t* data, size_t size) {
  size_t at = 0;
  auto next = [&]() -> uint8_t { return at < size ? data[at++] : 0; };
  Draw d;
  d.stage = next() % 4;
  d.world = 2 + next() % 2;
  d.gas = 1 + next() % 2;
  d.steps = 1 + next() % 3;
  for (int r = 0; r < d.world; ++r) {
    const uint8_t a = next(), b = next(), c = next();
    d.skips.push_back(static_cast<uint32_t>(a) | (static_cast<uint32_t>(b) << 8));
    // Mostly the common case: the same steps, no extra micro-step.
    d.steps_of.push_back(c % 8 == 7 ? d.steps + 1 : c % 8 == 6 ? d.steps - 1 : d.steps);
    d.extra.push_back(c % 16 == 5 ? 1 : 0);
  }
  return d;
}

void Fail(const std::string& why) {
  std::fprintf(stderr, "divergence_fuzz: %s\n", why.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Draw d = Decode(data, size);
  char tmpl[] = "/tmp/zero_divergence_fuzz.XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (dir == nullptr) Fail("mkdtemp failed");
  auto skipped = [d](int rank, int step, int, int p) {
    return step < 3 && ((d.skips[rank] >> (step * kDivergentParams + p)) & 1u) != 0;
  };
  DivergentPlan plan;
  plan.uses = [skipped](int r, int s, int m, int p) { return !skipped(r, s, m, p); };
  plan.steps_of = [d](int rank) { return d.steps_of[rank]; };
  plan.extra_micros = [d](int rank, int step) { return step == 0 ? d.extra[rank] : 0; };
  plan.saves = [](int) { return true; };
  plan.save_dir = dir;
  const zero::Config config = zero::testing::DivergentConfig(d.stage, d.gas);
  const std::vector<DivergentOutcome> out =
      zero::testing::RunDivergentOnThreads(config, d.world, plan);
  int ok = 0;
  for (const DivergentOutcome& o : out) ok += o.status.ok() ? 1 : 0;
  if (ok == d.world) {
    DivergentPlan ref = plan;
    ref.uses = nullptr;
    ref.zero_grad = skipped;
    ref.save_dir = std::string(dir) + "/ref";
    const std::vector<DivergentOutcome> want =
        zero::testing::RunDivergentOnThreads(config, d.world, ref);
    for (int r = 0; r < d.world; ++r) {
      if (!want[r].status.ok()) Fail("the reference failed: " + want[r].status.ToString());
      if (out[r].params != want[r].params) Fail("trained, but differs from the reference");
    }
  } else if (ok != 0) {
    Fail("some ranks finished while others failed");
  } else {
    for (int r = 0; r < d.world; ++r) {
      const absl::Status& s = out[r].status;
      if (out[r].seconds >= 2.5) Fail("rank failed after " + std::to_string(out[r].seconds) + " s");
      // A draw whose ranks all end mid-accumulation saves there: the ranks
      // agree on the call, then each refuses it (a call out of order).
      const bool mid_accumulation =
          absl::IsFailedPrecondition(s) &&
          s.message().find("in the middle of gradient accumulation") != std::string::npos;
      if (!zero::IsMismatch(s) && !mid_accumulation &&
          s.message().find("unusable") == std::string::npos) {
        Fail("rank " + std::to_string(r) + " failed otherwise: " + s.ToString());
      }
    }
  }
  std::string rm = std::string("rm -rf '") + dir + "'";
  if (std::system(rm.c_str()) != 0) Fail("cannot remove " + std::string(dir));
  return 0;
}
