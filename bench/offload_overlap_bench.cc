// ZeRO-Offload's step on the guarded stand-in with a modelled link and
// modelled compute (bench/README.md, "ZeRO-Offload overlapped"). One rank,
// bf16, 4 params of params/4; per stage 1-3 and mode
//   none     the optimizer on the device (the stand-in: its CPU worker);
//   exact    offload_optimizer "cpu": gradients down, host Adam, params up,
//            piece by piece in a pipeline (HostStateStore);
//   delayed  the same with offload_optimizer.delayed_update: the host
//            update runs behind the next step's compute.
// The link: each host<->device Copy takes bytes / link_gbps (one link per
// direction: concurrent copies in one direction queue): a memcpy on the
// copying thread after the stream's queued work, the rest of the time
// slept, so only the memcpy costs CPU (a DMA engine's costs none). The
// compute: forward and backward are `compute_ms` slept on the calling
// thread (the caller waiting for the GPU). The host Adam is real: cpu::OptimizerStep over the owned arrays.
// The none mode's device Adam runs on the stand-in's worker, on the CPU,
// where a GPU's would take a millisecond: none is slower here than there.
//
// JSON lines. `floors`: `adam_ms` (the host Adam alone over params
// elements, median of 3), `copy_ms` (the modelled floor: the slower
// direction, fp32 gradients down). The machine is shared, so every ratio
// pairs measurements taken back to back and reports the median over
// steps. exact with no compute: each step beside one host Adam alone,
// `vs_max_adam_copy` = step / max(that Adam, copy_ms) (target <= 1.3; on
// the stand-in the step also holds the norm and casts a GPU does in
// microseconds, run here on the CPU) and `update_vs_max_adam_copy` its
// update phase alone (wall_clock_breakdown: gradients down, host Adam,
// params up); beside them the step's copies as run (`memcpy_ms` wall,
// `memcpy_cpu_ms`: memcpys, CPU the host Adam also wants, where a GPU's
// DMA engines take none) and as modelled (`link_model_ms`), `memcpy_bound`
// = (Adam CPU + memcpy CPU) / Adam CPU, the least update / Adam the cores
// allow, and the step's CPU time over the Adam's (`step_cpu_vs_adam_cpu`,
// all threads: on a loaded machine the wall clock is mostly waiting). With
// compute (default 1.5 x adam_ms, so the host Adam fits behind it on an
// idle machine): none, exact and delayed engines stepped in turn,
// `exact_vs_no_offload` and `delayed_vs_no_offload` (target <= 1.1 for
// delayed). Then the test MLP's evaluation loss after 10 / 50 / 200
// steps, exact and delayed (convergence).
//
// Usage: offload_overlap_bench [params=8e6] [steps=8] [link_gbps=8]
//                              [compute_ms=auto: 1.5 x adam_ms]
// OFFLOAD_OVERLAP_TRACE=1 adds the timeline of each stage's last exact
// step: one line per host<->device copy.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_clock.h"
#include "bench/four_param_engine.h"
#include "core/comm/thread_communicator.h"
#include "core/device/guarded_device.h"
#include "core/engine/engine.h"
#include "core/optim/optimizer.h"
#include "core/profile/recorder.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/mlp_harness.h"

namespace {

using zero::bench::ProcessCpuSeconds;
using zero::bench::ThreadCpuSeconds;
using zero::bench::WallSeconds;

void Check(const absl::Status& s, const char* what) {
  zero::bench::CheckOk(s, "offload_overlap_bench", what);
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
    const double t0 = WallSeconds();
    // After the device work queued before it, as a copy on the stream is;
    // then the bytes move on this thread: one engine per direction, as a
    // GPU has, each copy's CPU measured on its own (the stand-in's Copy
    // would run both directions on its one worker).
    inner()->Synchronize();
    const double c0 = ThreadCpuSeconds();
    std::memcpy(Bytes(dst), Bytes(src), b);
    memcpy_cpu_ns_ += static_cast<int64_t>((ThreadCpuSeconds() - c0) * 1e9);
    const double took = WallSeconds() - t0, model = static_cast<double>(b) / bytes_per_s_;
    memcpy_ns_ += static_cast<int64_t>(took * 1e9);
    model_ns_ += static_cast<int64_t>(model * 1e9);
    if (model > took) std::this_thread::sleep_for(std::chrono::duration<double>(model - took));
    if (trace_) {
      std::lock_guard<std::mutex> t(trace_mu_);
      copies_.push_back({to_dev, b, t0, t0 + took, WallSeconds()});
    }
  }
  // One copy of the timeline: direction, bytes, when it started, when its
  // memcpy ended and when the modelled link let it return.
  struct Traced {
    bool up;
    size_t bytes;
    double start, memcpy_end, end;
  };
  void Trace(bool on) {
    std::lock_guard<std::mutex> t(trace_mu_);
    trace_ = on;
    copies_.clear();
  }
  std::vector<Traced> Copies() {
    std::lock_guard<std::mutex> t(trace_mu_);
    return copies_;
  }
  // Since the last call: ms the link's copies took as memcpys (the
  // stand-in's worker, on the CPU) and ms the model gives them.
  void TakeCopyMs(double* memcpy_ms, double* model_ms, double* memcpy_cpu_ms) {
    *memcpy_ms = memcpy_ns_.exchange(0) / 1e6;
    *model_ms = model_ns_.exchange(0) / 1e6;
    *memcpy_cpu_ms = memcpy_cpu_ns_.exchange(0) / 1e6;
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
  // Device memory through its alias (the stand-in's bytes), host as it is.
  static void* Bytes(const void* p) {
    void* a = zero::GuardedDevice::Alias(p);
    return a != nullptr ? a : const_cast<void*>(p);
  }

  std::atomic<int64_t> memcpy_ns_{0}, model_ns_{0}, memcpy_cpu_ns_{0};
  std::atomic<bool> trace_{false};
  std::mutex trace_mu_;
  std::vector<Traced> copies_;
};

// The host Adam alone over n elements (fp32 gradients in, bf16 working
// out), once per call, in ms: measured beside each step it is compared
// with, so both see the same load.
class HostAdam {
 public:
  explicit HostAdam(int64_t n) : n_(n), g_(n, 1e-3f), p_(n, 0.5f), m_(n), v_(n), w_(n) {
    opt_ = zero::MakeOptimizer(zero::Config());
  }
  // Its CPU ms (all threads) in *cpu_ms.
  double Ms(double* cpu_ms = nullptr) {
    const double t0 = WallSeconds(), c0 = ProcessCpuSeconds();
    zero::cpu::OptimizerStep(opt_->Scalars(1e-3, ++step_, 1.0f), g_.data(), zero::DType::kF32,
                             p_.data(), m_.data(), v_.data(), n_, w_.data(),
                             zero::DType::kBF16, false);
    if (cpu_ms != nullptr) *cpu_ms = (ProcessCpuSeconds() - c0) * 1e3;
    return (WallSeconds() - t0) * 1e3;
  }

 private:
  int64_t n_;
  int64_t step_ = 0;
  std::unique_ptr<zero::Optimizer> opt_;
  std::vector<float> g_, p_, m_, v_;
  std::vector<uint16_t> w_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One engine of a mode, stepped one step at a time.
class Runner {
 public:
  Runner(int stage, const std::string& mode, int64_t params, double gbps) {
    zero::Config c = zero::bench::FourParamConfig(stage, zero::DType::kBF16);
    c.observe.wall_clock_breakdown = true;
    if (mode != "none") {
      c.offload_optimizer.device = zero::OffloadDevice::kCpu;
      c.offload_optimizer.pin_memory = true;
      c.offload_optimizer.delayed_update = mode == "delayed";
    }
    auto link = std::make_unique<ModelledLinkDevice>(gbps);
    link_ = link.get();
    e_ = std::make_unique<zero::bench::FourParamEngine>(c, std::move(link), params,
                                                        "offload_overlap_bench");
  }
  ModelledLinkDevice* link() const { return link_; }
  // One step with `compute_ms` of modelled forward and backward: its wall
  // ms, the boundary's update phase in *update_ms and Engine::Step's CPU
  // ms (all threads) in *step_cpu_ms.
  double Step(double compute_ms, double* update_ms, double* step_cpu_ms = nullptr) {
    const double t0 = WallSeconds();
    e_->Forward();
    std::this_thread::sleep_for(std::chrono::duration<double>(compute_ms * 1e-3));
    e_->Backward();
    const double c0 = ProcessCpuSeconds();
    e_->Step();
    if (step_cpu_ms != nullptr) *step_cpu_ms = (ProcessCpuSeconds() - c0) * 1e3;
    if (update_ms != nullptr) {
      *update_ms = e_->engine()->recorder()->last().at(zero::Phase::kUpdate);
    }
    return (WallSeconds() - t0) * 1e3;
  }

 private:
  std::unique_ptr<zero::bench::FourParamEngine> e_;
  ModelledLinkDevice* link_ = nullptr;  // owned by e_'s engine
};

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
  const bool trace = std::getenv("OFFLOAD_OVERLAP_TRACE") != nullptr;
  HostAdam adam(params);
  std::vector<double> alone;
  for (int i = 0; i < 3; ++i) alone.push_back(adam.Ms());
  const double adam_ms = Median(alone);
  const double copy_ms = params * 4.0 / (gbps * 1e9) * 1e3;  // fp32 down: the slower
  const double compute_ms = argc > 4 ? std::atof(argv[4]) : 1.5 * adam_ms;
  std::printf("{\"bench\":\"offload_overlap\",\"what\":\"floors\",\"params\":%lld,"
              "\"link_gbps\":%.2f,\"adam_ms\":%.3f,\"copy_ms\":%.3f,\"compute_ms\":%.3f}\n",
              static_cast<long long>(params), gbps, adam_ms, copy_ms, compute_ms);
  std::fflush(stdout);
  for (int stage : {1, 2, 3}) {
    // Exact mode with no compute, each step beside one host Adam alone.
    {
      Runner exact(stage, "exact", params, gbps);
      std::vector<double> step_r, update_r, step_ms, update_ms, adam_v, memcpy_v, model_v,
          cpu_r, step_cpu_v, adam_cpu_v, memcpy_cpu_v, bound_v;
      for (int s = 0; s < steps + 2; ++s) {
        double update = 0, a_cpu = 0, s_cpu = 0, memcpy_ms = 0, model_ms = 0, memcpy_cpu = 0;
        const double a = adam.Ms(&a_cpu);
        exact.link()->TakeCopyMs(&memcpy_ms, &model_ms, &memcpy_cpu);
        exact.link()->Trace(trace && s == steps + 1);
        const double t0 = WallSeconds();
        const double ms = exact.Step(0.0, &update, &s_cpu);
        exact.link()->TakeCopyMs(&memcpy_ms, &model_ms, &memcpy_cpu);
        // The last step's copies, ms from the step's start: the update's
        // pieces are the down/up pairs (a down's memcpy waits behind the
        // device work queued before it; an up starts when its piece's
        // host Adam ended).
        for (const ModelledLinkDevice::Traced& c : exact.link()->Copies()) {
          std::printf("{\"bench\":\"offload_overlap\",\"what\":\"copy\",\"stage\":%d,"
                      "\"dir\":\"%s\",\"mb\":%.2f,\"start_ms\":%.2f,\"memcpy_end_ms\":%.2f,"
                      "\"end_ms\":%.2f}\n",
                      stage, c.up ? "up" : "down", c.bytes / 1e6, (c.start - t0) * 1e3,
                      (c.memcpy_end - t0) * 1e3, (c.end - t0) * 1e3);
        }
        if (s < 2) continue;  // warm-up
        const double floor = std::max(a, copy_ms);
        step_r.push_back(ms / floor);
        update_r.push_back(update / floor);
        step_ms.push_back(ms);
        update_ms.push_back(update);
        adam_v.push_back(a);
        memcpy_v.push_back(memcpy_ms);
        model_v.push_back(model_ms);
        step_cpu_v.push_back(s_cpu);
        adam_cpu_v.push_back(a_cpu);
        cpu_r.push_back(s_cpu / a_cpu);
        memcpy_cpu_v.push_back(memcpy_cpu);
        // The least update / Adam wall the cores allow when the copies are
        // memcpys: their CPU shares the cores the Adam's threads use.
        bound_v.push_back((a_cpu + memcpy_cpu) / a_cpu);
      }
      // memcpy_ms: the step's host<->device copies as the stand-in ran them
      // (memcpys on its worker thread, CPU the host Adam also wants);
      // link_model_ms: the same copies at the modelled link (both
      // directions, summed; copy_ms is the slower direction alone).
      std::printf("{\"bench\":\"offload_overlap\",\"stage\":%d,\"mode\":\"exact\","
                  "\"compute_ms\":0,\"step_ms\":%.3f,\"update_ms\":%.3f,\"adam_ms\":%.3f,"
                  "\"memcpy_ms\":%.3f,\"memcpy_cpu_ms\":%.3f,\"link_model_ms\":%.3f,"
                  "\"memcpy_bound\":%.3f,\"step_cpu_ms\":%.3f,"
                  "\"adam_cpu_ms\":%.3f,\"step_cpu_vs_adam_cpu\":%.3f,"
                  "\"vs_max_adam_copy\":%.3f,\"update_vs_max_adam_copy\":%.3f}\n",
                  stage, Median(step_ms), Median(update_ms), Median(adam_v), Median(memcpy_v),
                  Median(memcpy_cpu_v), Median(model_v), Median(bound_v), Median(step_cpu_v),
                  Median(adam_cpu_v), Median(cpu_r), Median(step_r), Median(update_r));
      std::fflush(stdout);
    }
    // The three modes with compute, a step of each in turn.
    Runner none(stage, "none", params, gbps), exact(stage, "exact", params, gbps),
        delayed(stage, "delayed", params, gbps);
    std::vector<double> n_ms, e_ms, d_ms, e_r, d_r;
    for (int s = 0; s < steps + 2; ++s) {
      const double n = none.Step(compute_ms, nullptr);
      const double e = exact.Step(compute_ms, nullptr);
      const double d = delayed.Step(compute_ms, nullptr);
      if (s < 2) continue;
      n_ms.push_back(n);
      e_ms.push_back(e);
      d_ms.push_back(d);
      e_r.push_back(e / n);
      d_r.push_back(d / n);
    }
    std::printf("{\"bench\":\"offload_overlap\",\"stage\":%d,\"compute_ms\":%.3f,"
                "\"none_ms\":%.3f,\"exact_ms\":%.3f,\"delayed_ms\":%.3f,"
                "\"exact_vs_no_offload\":%.3f,\"delayed_vs_no_offload\":%.3f,"
                "\"best_none_ms\":%.3f,\"best_delayed_ms\":%.3f}\n",
                stage, compute_ms, Median(n_ms), Median(e_ms), Median(d_ms), Median(e_r),
                Median(d_r), *std::min_element(n_ms.begin(), n_ms.end()),
                *std::min_element(d_ms.begin(), d_ms.end()));
    std::fflush(stdout);
  }
  for (int n : {10, 50, 200}) {
    std::printf("{\"bench\":\"offload_overlap\",\"what\":\"mlp_convergence\",\"steps\":%d,"
                "\"eval_loss_exact\":%.6f,\"eval_loss_delayed\":%.6f}\n",
                n, MlpLossAfter(n, false), MlpLossAfter(n, true));
    std::fflush(stdout);
  }
  return 0;
}
