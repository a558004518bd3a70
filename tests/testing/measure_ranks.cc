#include "tests/testing/measure_ranks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <mutex>

#include "core/common/status_macros.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/off_host_device.h"

namespace zero {
namespace testing {

std::vector<RankRun> MeasureOnThreadRanks(const Config& config, int world, bool off_host,
                                          const std::vector<ParamSpec>& params, int steps,
                                          const StepHook& hook) {
  std::vector<RankRun> out(world);
  std::mutex mu;
  RunThreads(world, [&](int rank, Communicator* comm) {
    auto run = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Create(config, comm));
      if (off_host) RETURN_IF_ERROR(e->SetDevice(std::make_unique<OffHostDevice>()));
      for (ParamSpec ps : params) {
        ps.init = nullptr;
        RETURN_IF_ERROR(e->RegisterParam(ps).status());
      }
      RETURN_IF_ERROR(e->Finalize());
      const int n = e->num_params();
      RankRun r;
      for (int step = 0; step < steps; ++step) {
        if (hook) RETURN_IF_ERROR(hook(rank, step, comm));
        for (int id = 0; id < n; ++id) {
          RETURN_IF_ERROR(e->Gather(id).status());
          RETURN_IF_ERROR(e->Release(id));
        }
        for (int id = n - 1; id >= 0; --id) {
          if (!params[id].trainable) continue;
          RETURN_IF_ERROR(e->Gather(id).status());
          RETURN_IF_ERROR(e->GradBuffer(id).status());
          RETURN_IF_ERROR(e->GradReady(id));
          RETURN_IF_ERROR(e->Release(id));
        }
        RETURN_IF_ERROR(e->Step().status());
        r.after.push_back(e->Stats());
      }
      if (hook) RETURN_IF_ERROR(hook(rank, steps, comm));
      if (off_host) r.device_allocated = static_cast<int64_t>(e->device()->allocated_bytes());
      std::lock_guard<std::mutex> l(mu);
      out[rank] = std::move(r);
      return absl::OkStatus();
    };
    absl::Status s = run();
    std::lock_guard<std::mutex> l(mu);
    EXPECT_TRUE(s.ok()) << "rank " << rank << ": " << s;
  });
  return out;
}

void ExpectNear2(const char* what, int64_t estimated, int64_t measured, int rank) {
  const double tol = 0.02 * static_cast<double>(measured);
  EXPECT_LE(std::fabs(static_cast<double>(estimated - measured)), tol)
      << what << " on rank " << rank << ": estimated " << estimated << ", measured " << measured;
}

void ExpectNearStats(const EstimatedBytes& e, const EngineStats& s, int rank) {
  const int64_t buffers = s.buffer_bytes - s.live_gathered_bytes;
  ExpectNear2("param_bytes", e.param, s.param_bytes, rank);
  ExpectNear2("grad_bytes", e.grad, s.grad_bytes, rank);
  ExpectNear2("master_bytes", e.master, s.master_bytes, rank);
  ExpectNear2("optimizer_bytes", e.optimizer, s.optimizer_bytes, rank);
  ExpectNear2("frozen_bytes", e.frozen, s.frozen_bytes, rank);
  ExpectNear2("buffer_bytes", e.buffers, buffers, rank);
  ExpectNear2("total", e.param + e.grad + e.master + e.optimizer + e.frozen + e.buffers,
              s.param_bytes + s.grad_bytes + s.master_bytes + s.optimizer_bytes +
                  s.frozen_bytes + buffers,
              rank);
}

}  // namespace testing
}  // namespace zero
