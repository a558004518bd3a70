#include "tests/testing/divergent_run.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "core/comm/thread_communicator.h"
#include "core/common/status_macros.h"
#include "core/engine/engine.h"

namespace zero {
namespace testing {
namespace {

constexpr int64_t kNumel[kDivergentParams] = {13, 10, 10, 10, 7};

std::vector<float> InitialValues(int p) {
  std::vector<float> v(kNumel[p]);
  for (int64_t i = 0; i < kNumel[p]; ++i) v[i] = 0.05f * std::sin(1.3f * i + 0.9f * p);
  return v;
}

// A gradient that depends on the gathered values (stage 3 must hand the
// right ones), the rank's data and the micro-step.
void FillGrad(int p, int rank, int step, int micro, const std::vector<float>& w, float* g) {
  for (int64_t i = 0; i < kNumel[p]; ++i) {
    g[i] = std::sin(0.1f * (i + 1) + 0.7f * p + 0.3f * rank + 0.05f * step + 0.01f * micro) *
           (1.0f + 0.1f * w[i]);
  }
}

absl::Status TrainSteps(Engine* e, int rank, const DivergentPlan& plan, int gas,
                        const std::vector<int>& ids) {
  const int steps = plan.steps_of ? plan.steps_of(rank) : plan.steps;
  std::vector<std::vector<float>> w(kDivergentParams);
  for (int step = 0; step < steps; ++step) {
    const int micros = gas + (plan.extra_micros ? plan.extra_micros(rank, step) : 0);
    for (int m = 0; m < micros; ++m) {
      auto used = [&](int p) { return !plan.uses || plan.uses(rank, step, m, p); };
      for (int p = 0; p < kDivergentParams; ++p) {  // forward
        if (!used(p)) continue;
        ASSIGN_OR_RETURN(void* data, e->Gather(ids[p]));
        w[p].resize(kNumel[p]);
        std::memcpy(w[p].data(), data, kNumel[p] * sizeof(float));
      }
      for (int p = kDivergentParams - 1; p >= 0; --p) {  // backward
        if (!used(p)) continue;
        ASSIGN_OR_RETURN(void* g, e->GradBuffer(ids[p]));
        if (plan.zero_grad && plan.zero_grad(rank, step, m, p)) {
          std::memset(g, 0, kNumel[p] * sizeof(float));
        } else {
          FillGrad(p, rank, step, m, w[p], static_cast<float*>(g));
        }
        RETURN_IF_ERROR(e->GradReady(ids[p]));
        RETURN_IF_ERROR(e->Release(ids[p]));
      }
      RETURN_IF_ERROR(e->Step().status());
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* DivergentParamName(int p) {
  static const char* const kNames[kDivergentParams] = {
      "shared.weight", "experts.0.weight", "experts.1.weight", "experts.2.weight", "head.bias"};
  return kNames[p];
}

Config DivergentConfig(int stage, int gas) {
  Config c;
  c.stage = stage;
  c.dtype = DType::kF32;
  c.lr = 1e-2;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 60;
  c.gradient_accumulation_steps = gas;
  c.reduce_bucket_size = 16;  // about one param per bucket
  c.stage3_param_persistence_threshold = 0;
  return c;
}

DivergentOutcome RunDivergent(const Config& config, int rank, Communicator* comm,
                              const DivergentPlan& plan) {
  DivergentOutcome out;
  auto made = Engine::Create(config, comm);
  if (!made.ok()) {
    out.status = made.status();
    return out;
  }
  std::unique_ptr<Engine> e = std::move(*made);
  std::vector<int> ids(kDivergentParams);
  for (int p = 0; p < kDivergentParams; ++p) {
    std::vector<float> init = InitialValues(p);
    ParamSpec spec;
    spec.name = DivergentParamName(p);
    spec.shape = {kNumel[p]};
    spec.init = init.data();
    auto id = e->RegisterParam(spec);
    if (!id.ok()) {
      out.status = id.status();
      return out;
    }
    ids[p] = *id;
  }
  out.status = e->Finalize();
  const auto t0 = std::chrono::steady_clock::now();
  if (out.status.ok()) {
    out.status = TrainSteps(e.get(), rank, plan, static_cast<int>(config.gradient_accumulation_steps), ids);
  }
  if (out.status.ok() && plan.saves && plan.saves(rank)) {
    out.status = e->Save(plan.save_dir, "end");
  }
  if (out.status.ok() && plan.reads_state && plan.reads_state(rank)) {
    for (int p = 0; p < kDivergentParams && out.status.ok(); ++p) {
      std::vector<float> v(kNumel[p]);
      out.status = e->ReadMaster(ids[p], v.data());
    }
  }
  if (out.status.ok()) {
    out.params.resize(kDivergentParams);
    for (int p = 0; p < kDivergentParams && out.status.ok(); ++p) {
      out.params[p].resize(kNumel[p]);
      out.status = e->ReadMaster(ids[p], out.params[p].data());
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.flight_record = e->FlightRecord();
  return out;
}

std::vector<DivergentOutcome> RunDivergentOnThreads(const Config& config, int world,
                                                    const DivergentPlan& plan) {
  auto comms = MakeThreadCommunicators(world);
  std::vector<DivergentOutcome> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { out[r] = RunDivergent(config, r, comms[r].get(), plan); });
  }
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace testing
}  // namespace zero
