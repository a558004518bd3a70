// Preemption (docs/ARCHITECTURE.md, "Preemption"): a scheduler's signal
// (SIGTERM by default) sets a flag; at the end of the step that ends an
// accumulation every rank learns, by one control all-reduce, whether any
// rank got it, and then every rank saves the same step (synchronously) and
// exits with a message, together, even if only one rank got the signal.
#ifndef ZERO_CORE_ENGINE_PREEMPTION_H_
#define ZERO_CORE_ENGINE_PREEMPTION_H_

#include <signal.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine/engine_context.h"

namespace zero {

struct PreemptionOptions {
  int signal = SIGTERM;
  std::string dir;  // where the preemption checkpoint goes (required)
  std::string tag;  // empty: "global_step<N>", DeepSpeed's default tag
  // true: after the save, exit the process with `exit_code` (0: 128 +
  // signal, the status of a process the signal killed). false: the step
  // returns Cancelled with the message and the caller exits.
  bool exit = true;
  int exit_code = 0;
};

class Preemption {
 public:
  using SaveFn = std::function<absl::Status(const std::string& dir, const std::string& tag)>;
  // Installs the handler of options.signal (the previous one comes back at
  // destruction). One engine at a time may watch a given signal.
  static absl::StatusOr<std::unique_ptr<Preemption>> Install(EngineContext* ctx,
                                                             const PreemptionOptions& options,
                                                             SaveFn save);
  ~Preemption();
  Preemption(const Preemption&) = delete;
  Preemption& operator=(const Preemption&) = delete;

  // COLLECTIVE, at every optimizer boundary: OK when no rank got the
  // signal; otherwise saves and exits (or returns Cancelled).
  absl::Status AtBoundary(int64_t global_step);

 private:
  Preemption(EngineContext* ctx, PreemptionOptions o, SaveFn save)
      : ctx_(ctx), options_(std::move(o)), save_(std::move(save)) {}
  EngineContext* ctx_;
  PreemptionOptions options_;
  SaveFn save_;
  struct sigaction previous_ {};
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_PREEMPTION_H_
