// The engine a device bench steps (device_step_bench, offload_overlap_bench):
// one rank on the thread communicator, four params of a quarter of `params`
// elements each (a transformer block's shapes, roughly) on the device it is
// given, and a training step's engine calls without a model.
#ifndef ZERO_BENCH_FOUR_PARAM_ENGINE_H_
#define ZERO_BENCH_FOUR_PARAM_ENGINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/device/device.h"
#include "core/engine/engine.h"

namespace zero {
namespace bench {

// A failed call ends the bench: "BENCH: WHAT: STATUS" on stderr, exit 1.
void CheckOk(const absl::Status& s, const char* bench, const char* what);

// The config both benches start from: `stage`, `dtype`, no step prints, and
// every param gathered at stage 3 (no persistence threshold).
Config FourParamConfig(int stage, DType dtype);

class FourParamEngine {
 public:
  // The params have c.dtype; a failed call ends the bench, naming `bench`.
  FourParamEngine(const Config& c, std::unique_ptr<Device> device, int64_t params,
                  const char* bench);

  Engine* engine() const { return engine_.get(); }
  // The forward's calls: at stage 3 each param gathered and released.
  void Forward();
  // The backward's: each param's gradient buffer handed in as GradBuffer
  // gives it, the last param first.
  void Backward();
  // Engine::Step, then the device synchronized: Step returns with the update
  // queued on the device, so a step timed to here is a step done.
  void Step();

 private:
  const char* bench_;
  int stage_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::unique_ptr<Engine> engine_;
  std::vector<int> ids_;
};

}  // namespace bench
}  // namespace zero

#endif  // ZERO_BENCH_FOUR_PARAM_ENGINE_H_
