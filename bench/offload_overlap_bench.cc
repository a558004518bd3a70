// ZeRO-Offload's step on the guarded stand-in with a modelled link and
// modelled compute (bench/README.md, "ZeRO-Offload overlapped"). One rank,
// bf16, 4 params of params/4; per stage 1-3 and mode
//   none     the optimizer on the device (the stand-in: its CPU worker);
//   exact    offload_optimizer "cpu": gradients down, host Adam, params up,
//            piece by piece in a pipeline (HostStateStore);
//   delayed  the same with offload_optimizer.delayed_update: the host
//            update runs behind the next step's compute.
// The link: each host<->device Copy takes bytes / link_gbps (one link per
// direction: concurrent copies in one direction queue), slept, so it costs
// no CPU, as a DMA engine does not. The compute: forward and backward are
// `compute_ms` slept on the calling thread (the caller waiting for the
// GPU). The host Adam is real: cpu::OptimizerStep over the owned arrays.
//
// JSON lines: `adam_ms` (the host Adam alone over params elements, best of
// 3, measured again before each stage), `copy_ms` (the modelled floor: the
// slower direction, fp32 gradients down); per stage and mode the median
// and the fastest step and the median update phase (`update_ms`,
// wall_clock_breakdown: gradients down, host Adam, params up). exact at
// compute 0: `update_vs_max_adam_copy` = update / max(adam_ms, copy_ms)
// (target <= 1.3; `vs_max_adam_copy` the whole step, which on the stand-in
// also holds the norm and casts a GPU does in microseconds, run here on the
// CPU). With compute: `vs_no_offload` = step / the none step at the same
// compute (target <= 1.1 for delayed), and `vs_no_offload_free_update` =
// step / (the none step less its update phase): against a GPU whose own
// Adam costs nothing (the stand-in runs it on the CPU). Then the test MLP's
// evaluation loss after each count of steps, exact and delayed.
//
// Usage: offload_overlap_bench [params=8e6] [steps=8] [link_gbps=8]
//                              [compute_ms=auto: 1.5 x adam_ms]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/thread_communicator.h"
#include "core/device/guarded_device.h"
#include "core/engine/engine.h"
#include "core/optim/optimizer.h"
#include "core/profile/recorder.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/mlp_harness.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "offload_overlap_bench: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

// The stand-in whose host<->device copies take the modelled link's time.
class ModelledLinkDevice : public zero::testing::ForwardingDevice {
 public:
  explicit ModelledLinkDevice(double gbps)
      : ForwardingDevice(zero::MakeGuardedDevice()), bytes_per_s_(gbps * 1e9) {}
  std::string name() const override { return "standin+link"; }
  bool host_accessible() const override { return false; }
  void Copy(void* dst, const void* src, size_t b) override {
    const bool to_dev = zero::GuardedDevice::IsDeviceMemory(dst);
    const bool from_dev = zero::GuardedDevice::IsDeviceMemory(src);
    if (to_dev == from_dev) return inner()->Copy(dst, src, b);
    std::lock_guard<std::mutex> l(to_dev ? up_ : down_);
    const double t0 = Now();
    inner()->Copy(dst, src, b);
    const double left = static_cast<double>(b) / bytes_per_s_ - (Now() - t0);
    if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
  }
  absl::Status status() const override { return inner()->status(); }
  void* stream_handle() const override { return inner()->stream_handle(); }
  zero::DeviceMemoryStats memory_stats() const override { return inner()->memory_stats(); }
  absl::StatusOr<void*> AllocateHost(size_t bytes, bool pinned) override {
    return inner()->AllocateHost(bytes, pinned);
  }
  void FreeHost(void* p, bool pinned) override { inner()->FreeHost(p, pinned); }

 private:
  const double bytes_per_s_;
  std::mutex up_, down_;
};

// The host Adam alone over n elements: fp32 gradients in, bf16 working out.
double AdamMs(int64_t n) {
  zero::Config c;
  auto opt = zero::MakeOptimizer(c);
  std::vector<float> g(n, 1e-3f), p(n, 0.5f), m(n), v(n);
  std::vector<uint16_t> w(n);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const double t0 = Now();
    zero::cpu::OptimizerStep(opt->Scalars(1e-3, i + 1, 1.0f), g.data(), zero::DType::kF32,
                             p.data(), m.data(), v.data(), n, w.data(), zero::DType::kBF16,
                             false);
    best = std::min(best, Now() - t0);
  }
  return best * 1e3;
}

struct Timing {
  double median_ms, best_ms;
  double update_ms;  // the boundary's update phase (wall_clock_breakdown), median
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Timing StepMs(int stage, const std::string& mode, int64_t params, int steps, double gbps,
              double compute_ms) {
  zero::Config c;
  c.stage = stage;
  c.dtype = zero::DType::kBF16;
  c.steps_per_print = 0;
  c.stage3_param_persistence_threshold = 0;
  c.observe.wall_clock_breakdown = true;
  if (mode != "none") {
    c.offload_optimizer.device = zero::OffloadDevice::kCpu;
    c.offload_optimizer.pin_memory = true;
    c.offload_optimizer.delayed_update = mode == "delayed";
  }
  auto comms = zero::MakeThreadCommunicators(1);
  auto e = zero::Engine::Create(c, comms[0].get());
  Check(e.status(), "create");
  Check((*e)->SetDevice(std::make_unique<ModelledLinkDevice>(gbps)), "set_device");
  std::vector<int> ids;
  for (int i = 0; i < 4; ++i) {
    zero::ParamSpec p;
    p.name = "p" + std::to_string(i);
    p.shape = {params / 4};
    p.dtype = c.dtype;
    auto id = (*e)->RegisterParam(p);
    Check(id.status(), "register");
    ids.push_back(*id);
  }
  Check((*e)->Finalize(), "finalize");
  std::vector<double> ms, update;
  for (int s = 0; s < steps + 2; ++s) {  // two warm-up steps
    const double t0 = Now();
    if (stage == 3) {
      for (int id : ids) {
        Check((*e)->Gather(id).status(), "gather");
        Check((*e)->Release(id), "release");
      }
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(compute_ms * 1e-3));
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      Check((*e)->GradBuffer(*it).status(), "grad_buffer");
      Check((*e)->GradReady(*it), "grad_ready");
    }
    Check((*e)->Step().status(), "step");
    (*e)->device()->Synchronize();
    if (s < 2) continue;
    ms.push_back((Now() - t0) * 1e3);
    update.push_back((*e)->recorder()->last().at(zero::Phase::kUpdate));
  }
  return {Median(ms), *std::min_element(ms.begin(), ms.end()), Median(update)};
}

// The test MLP (tests/testing/mlp_harness.h) on the stand-in, one rank:
// its evaluation loss after `steps` steps, exact or delayed.
double MlpLossAfter(int steps, bool delayed) {
  zero::Config c = zero::testing::SmallMlpConfig(2, zero::DType::kF32);
  c.offload_optimizer.device = zero::OffloadDevice::kCpu;
  c.offload_optimizer.delayed_update = delayed;
  zero::testing::MlpSpec spec;
  spec.steps = steps;
  spec.make_device = [] { return std::unique_ptr<zero::Device>(zero::MakeGuardedDevice()); };
  auto comms = zero::MakeThreadCommunicators(1);
  auto r = zero::testing::TrainMlp(c, comms[0].get(), spec);
  Check(r.status(), "mlp");
  return zero::testing::MlpEvalLoss(spec, *r);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t params = argc > 1 ? static_cast<int64_t>(std::atof(argv[1])) : 8000000;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 8;
  const double gbps = argc > 3 ? std::atof(argv[3]) : 8.0;
  double adam_ms = AdamMs(params);
  const double copy_ms = params * 4.0 / (gbps * 1e9) * 1e3;  // fp32 down: the slower
  const double compute_ms = argc > 4 ? std::atof(argv[4]) : 1.5 * adam_ms;
  std::printf("{\"bench\":\"offload_overlap\",\"what\":\"floors\",\"params\":%lld,"
              "\"link_gbps\":%.2f,\"adam_ms\":%.3f,\"copy_ms\":%.3f,\"compute_ms\":%.3f}\n",
              static_cast<long long>(params), gbps, adam_ms, copy_ms, compute_ms);
  std::fflush(stdout);
  for (int stage : {1, 2, 3}) {
    // The host Adam again beside each run: the machine's load moves.
    adam_ms = AdamMs(params);
    const Timing exact0 = StepMs(stage, "exact", params, steps, gbps, 0.0);
    std::printf("{\"bench\":\"offload_overlap\",\"stage\":%d,\"mode\":\"exact\",\"compute_ms\":0,"
                "\"step_ms\":%.3f,\"best_ms\":%.3f,\"update_ms\":%.3f,\"adam_ms\":%.3f,"
                "\"vs_max_adam_copy\":%.3f,\"update_vs_max_adam_copy\":%.3f}\n",
                stage, exact0.median_ms, exact0.best_ms, exact0.update_ms, adam_ms,
                exact0.median_ms / std::max(adam_ms, copy_ms),
                exact0.update_ms / std::max(adam_ms, copy_ms));
    std::fflush(stdout);
    double none_ms = 0, none_rest_ms = 0;
    for (const char* mode : {"none", "exact", "delayed"}) {
      const Timing t = StepMs(stage, mode, params, steps, gbps, compute_ms);
      if (std::string(mode) == "none") {
        none_ms = t.median_ms;
        none_rest_ms = t.median_ms - t.update_ms;
      }
      std::printf("{\"bench\":\"offload_overlap\",\"stage\":%d,\"mode\":\"%s\","
                  "\"compute_ms\":%.3f,\"step_ms\":%.3f,\"best_ms\":%.3f,\"update_ms\":%.3f,"
                  "\"vs_no_offload\":%.3f,\"vs_no_offload_free_update\":%.3f}\n",
                  stage, mode, compute_ms, t.median_ms, t.best_ms, t.update_ms,
                  t.median_ms / none_ms, t.median_ms / none_rest_ms);
      std::fflush(stdout);
    }
  }
  for (int n : {10, 50, 200}) {
    std::printf("{\"bench\":\"offload_overlap\",\"what\":\"mlp_convergence\",\"steps\":%d,"
                "\"eval_loss_exact\":%.6f,\"eval_loss_delayed\":%.6f}\n",
                n, MlpLossAfter(n, false), MlpLossAfter(n, true));
    std::fflush(stdout);
  }
  return 0;
}
