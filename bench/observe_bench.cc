// The cost of observing a run: step time with wall_clock_breakdown and
// comms_logger on against the same training with them off, in one process,
// step for step interleaved (off, on, on, off, ...) so that machine load
// falls on both alike. Thread ranks; a GPT-like stack of layers; optional
// busy compute per layer standing in for the model's math.
//
//   bazel build -c opt //bench:observe_bench
//   bazel-bin/bench/observe_bench [world=2] [stage=2] [steps=200] [width=512]
//                                 [layers=8] [compute_ms=0] [trace=0] [nvme_dir]
//
// With nvme_dir, both keep their optimizer state on NVMe (under
// nvme_dir/off and nvme_dir/on), so the NVMe time hooks (C ABI 1.6) count too.
//
// Prints one JSON line per configuration: median step time off and on, the
// median of the per-pair ratios on/off and its interquartile range.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_clock.h"
#include "core/comm/thread_communicator.h"
#include "core/engine/engine.h"
#include "core/profile/comm_log.h"
#include "core/profile/recorder.h"

namespace {

using zero::bench::ProcessCpuSeconds;
using zero::bench::WallSeconds;
using zero::Config;
using zero::Engine;

void Compute(double ms) {
  if (ms <= 0) return;
  const double end = WallSeconds() + ms * 1e-3;
  volatile double x = 1;
  while (WallSeconds() < end) x = x * 1.0000001 + 1e-9;
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

std::unique_ptr<Engine> Make(const Config& c, zero::Communicator* comm, int layers, int64_t width) {
  auto e = Engine::Create(c, comm);
  if (!e.ok()) {
    std::fprintf(stderr, "create: %s\n", std::string(e.status().message()).c_str());
    std::exit(1);
  }
  for (int l = 0; l < layers; ++l) {
    zero::ParamSpec w;
    w.name = "h" + std::to_string(l) + ".w";
    w.shape = {width, width};
    w.dtype = c.dtype;
    if (!(*e)->RegisterParam(w).ok()) std::exit(1);
    zero::ParamSpec b;
    b.name = "h" + std::to_string(l) + ".b";
    b.shape = {width};
    b.dtype = c.dtype;
    if (!(*e)->RegisterParam(b).ok()) std::exit(1);
  }
  if (!(*e)->Finalize().ok()) std::exit(1);
  return std::move(*e);
}

// One micro-step (the config has one per optimizer step).
double Step(Engine* e, double compute_ms) {
  const double t0 = WallSeconds();
  const int n = e->num_params();
  for (int id = 0; id < n; ++id) {
    (void)e->Gather(id);
    Compute(compute_ms);
    (void)e->Release(id);
  }
  for (int id = n - 1; id >= 0; --id) {
    (void)e->Gather(id);
    Compute(compute_ms);
    (void)e->GradBuffer(id);
    (void)e->GradReady(id);
    (void)e->Release(id);
  }
  (void)e->Step();
  return (WallSeconds() - t0) * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, double d) { return argc > i ? std::atof(argv[i]) : d; };
  const int world = static_cast<int>(arg(1, 2));
  const int stage = static_cast<int>(arg(2, 2));
  const int steps = static_cast<int>(arg(3, 200));
  const int64_t width = static_cast<int64_t>(arg(4, 512));
  const int layers = static_cast<int>(arg(5, 8));
  const double compute_ms = arg(6, 0);
  const bool trace = arg(7, 0) != 0;
  Config off;
  off.stage = stage;
  off.dtype = zero::DType::kBF16;
  off.steps_per_print = 0;
  off.reduce_bucket_size = width * width;
  off.stage3_prefetch_bucket_size = width * width;
  off.stage3_param_persistence_threshold = 10 * width;
  off.overlap_comm = 1;
  const std::string nvme = argc > 8 ? argv[8] : "";
  if (!nvme.empty()) {
    off.offload_optimizer.device = zero::OffloadDevice::kNvme;
    off.offload_optimizer.nvme_path = nvme + "/off";
    ::mkdir(off.offload_optimizer.nvme_path.c_str(), 0700);
  }
  Config on = off;
  if (!nvme.empty()) {
    on.offload_optimizer.nvme_path = nvme + "/on";
    ::mkdir(on.offload_optimizer.nvme_path.c_str(), 0700);
  }
  on.observe.wall_clock_breakdown = true;
  on.observe.comms_logger = true;
  if (trace) {
    on.observe.trace_path = "/tmp/observe_bench_trace.json";
    on.observe.trace_start_step = 0;
    on.observe.trace_end_step = 1 << 30;  // every step kept in memory
  }
  // The hooks' own cost, which load does not hide: a timed scope (two clock
  // reads, an atomic add) and a logged collective (a map update under a
  // mutex), best of 5 rounds.
  double scope_ns = 1e30, record_ns = 1e30;
  {
    zero::Recorder rec(0, true, {});
    zero::CommLog log(0, world, {});
    for (int round = 0; round < 5; ++round) {
      const int n = 200000;
      const double t0 = WallSeconds();
      for (int i = 0; i < n; ++i) zero::ScopedPhase p(&rec, zero::Phase::kReduce);
      const double t1 = WallSeconds();
      for (int i = 0; i < n; ++i) {
        log.Record(zero::CollectiveOp::kAllReduce, zero::CollectiveKind::kAllReduce, 4096, 4096,
                   1e-6);
      }
      const double t2 = WallSeconds();
      scope_ns = std::min(scope_ns, (t1 - t0) * 1e9 / n);
      record_ns = std::min(record_ns, (t2 - t1) * 1e9 / n);
    }
  }
  int64_t collectives = 0;
  auto comms = zero::MakeThreadCommunicators(world);
  std::vector<double> t_off, t_on, ratio, cpu_off, cpu_on;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto a = Make(off, comms[r].get(), layers, width);
      auto b = Make(on, comms[r].get(), layers, width);
      for (int w = 0; w < 3; ++w) Step(a.get(), compute_ms), Step(b.get(), compute_ms);
      for (int s = 0; s < steps; ++s) {
        // Alternate which goes first, so neither always follows the other.
        // Process CPU time over both ranks' threads (all run the same
        // engine at a time: the collectives keep them in step): less
        // sensitive to other load than wall time.
        double x, y, cx, cy, c0 = ProcessCpuSeconds();
        if (s % 2 == 0) {
          x = Step(a.get(), compute_ms);
          const double c1 = ProcessCpuSeconds();
          y = Step(b.get(), compute_ms);
          cx = (c1 - c0) * 1e3, cy = (ProcessCpuSeconds() - c1) * 1e3;
        } else {
          y = Step(b.get(), compute_ms);
          const double c1 = ProcessCpuSeconds();
          x = Step(a.get(), compute_ms);
          cy = (c1 - c0) * 1e3, cx = (ProcessCpuSeconds() - c1) * 1e3;
        }
        if (r == 0) {
          std::lock_guard<std::mutex> l(mu);
          t_off.push_back(x);
          t_on.push_back(y);
          ratio.push_back(y / x);
          cpu_off.push_back(cx);
          cpu_on.push_back(cy);
        }
      }
      if (r == 0) {
        std::lock_guard<std::mutex> l(mu);
        std::fprintf(stderr, "%s", b->recorder()->FormatLast().c_str());
        for (const auto& e : b->comm_log()->Entries()) collectives += e.count;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double params = static_cast<double>(layers) * (width * width + width);
  // Per step: forward gathers (a call mark and, at stage 3, a scope), backward
  // gather + grad_buffer + grad_ready (each a mark and a scope), the step's
  // dozen scopes; each collective is timed once more by the log.
  const int n = 2 * layers;
  const int hooks = 2 * n + 5 * n + 12;
  const double per_step_coll = static_cast<double>(collectives) / (steps + 3);
  std::printf(
      "{\"bench\": \"observe_overhead\", \"world\": %d, \"stage\": %d, \"params\": %.0f, "
      "\"compute_ms_per_layer_pass\": %.3f, \"trace\": %s, \"nvme\": %s, \"steps\": %d, "
      "\"median_step_ms_off\": %.4f, \"median_step_ms_on\": %.4f, "
      "\"median_ratio_on_over_off\": %.4f, \"ratio_q25\": %.4f, \"ratio_q75\": %.4f, "
      "\"ratio_of_medians\": %.4f, \"cpu_ms_off\": %.4f, \"cpu_ms_on\": %.4f, "
      "\"cpu_ratio_of_medians\": %.4f, \"scope_ns\": %.1f, \"log_record_ns\": %.1f, "
      "\"hooks_per_step\": %d, \"collectives_per_step\": %.1f, "
      "\"hook_cost_over_step\": %.5f, \"target\": \"<= 1.03\"}\n",
      world, stage, params, compute_ms, trace ? "true" : "false", nvme.empty() ? "false" : "true",
      steps, Quantile(t_off, 0.5),
      Quantile(t_on, 0.5), Quantile(ratio, 0.5), Quantile(ratio, 0.25), Quantile(ratio, 0.75),
      Quantile(t_on, 0.5) / Quantile(t_off, 0.5), Quantile(cpu_off, 0.5), Quantile(cpu_on, 0.5),
      Quantile(cpu_on, 0.5) / Quantile(cpu_off, 0.5), scope_ns, record_ns, hooks,
      per_step_coll,
      (hooks * scope_ns + per_step_coll * (record_ns + scope_ns)) / 1e6 / Quantile(t_off, 0.5));
  return 0;
}
