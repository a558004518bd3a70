// The Muon phase's wall time (docs/ARCHITECTURE.md, "Muon"): the same
// GPT-shaped blocks (qkv 3h x h, proj h x h, fc 4h x h, fc2 h x 4h, with
// biases) stepped by Muon and by AdamW on `world` thread ranks, fp32, at
// stage 0-3; the Muon step less the AdamW step is the phase (momentum,
// exchanges, owner-rank Newton-Schulz, the master's update and commit). Each
// number is the median over `steps` timed steps after one untimed (the
// buffers made), rank 0's Engine::Step, in wall time and in the calling
// thread's CPU time (`*_cpu_ms`: the phase runs on it, Newton-Schulz of the
// matrices rank 0 owns included; a loaded machine disturbs it far less than
// wall time). Each rank's Newton-Schulz runs on its own thread, so at
// world > 1 the machine's free cores matter. JSON lines.
//
// Usage: muon_phase_bench [hidden=128] [layers=2] [steps=5] [worlds=1,2,4]
//   [stages=1,2,3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_clock.h"
#include "core/comm/thread_communicator.h"
#include "core/config/config.h"
#include "core/engine/engine.h"

namespace {

using zero::bench::ThreadCpuSeconds;
using zero::bench::WallSeconds;

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "muon_phase_bench: %s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

std::vector<int> Ints(const char* text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

struct Shape {
  std::string name;
  std::vector<int64_t> dims;
};

std::vector<Shape> Blocks(int64_t h, int layers) {
  std::vector<Shape> out;
  for (int l = 0; l < layers; ++l) {
    const std::string p = "h" + std::to_string(l) + ".";
    out.push_back({p + "qkv.w", {3 * h, h}});
    out.push_back({p + "qkv.b", {3 * h}});
    out.push_back({p + "proj.w", {h, h}});
    out.push_back({p + "proj.b", {h}});
    out.push_back({p + "fc.w", {4 * h, h}});
    out.push_back({p + "fc.b", {4 * h}});
    out.push_back({p + "fc2.w", {h, 4 * h}});
    out.push_back({p + "fc2.b", {h}});
  }
  return out;
}

struct Timing {
  double wall = 0, cpu = 0;  // seconds
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rank 0's median Step() seconds over `steps` steps after one untimed.
Timing MedianStep(const zero::Config& c, int world, const std::vector<Shape>& model, int steps) {
  auto comms = zero::MakeThreadCommunicators(world);
  std::vector<double> times, cpu;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto made = zero::Engine::Create(c, comms[r].get());
      Check(made.status(), "create");
      std::unique_ptr<zero::Engine> e = std::move(*made);
      std::vector<int> ids;
      for (const Shape& s : model) {
        zero::ParamSpec ps;
        ps.name = s.name;
        ps.shape = s.dims;
        ps.dtype = zero::DType::kF32;
        auto id = e->RegisterParam(ps);
        Check(id.status(), "register");
        ids.push_back(*id);
      }
      Check(e->Finalize(), "finalize");
      for (int step = 0; step <= steps; ++step) {
        for (int k = static_cast<int>(ids.size()) - 1; k >= 0; --k) {
          Check(e->Gather(ids[k]).status(), "gather");
          auto g = e->GradBuffer(ids[k]);
          Check(g.status(), "grad_buffer");
          auto n = e->ParamNumel(ids[k]);
          std::vector<float> v(*n);
          for (int64_t i = 0; i < *n; ++i) v[i] = 1e-3f * static_cast<float>((i * 7 + k + step) % 13);
          e->device()->Copy(*g, v.data(), *n * 4);
          Check(e->GradReady(ids[k]), "grad_ready");
          Check(e->Release(ids[k]), "release");
        }
        const double t0 = WallSeconds(), c0 = ThreadCpuSeconds();
        Check(e->Step().status(), "step");
        const double dt = WallSeconds() - t0, dc = ThreadCpuSeconds() - c0;
        if (r == 0 && step > 0) {
          std::lock_guard<std::mutex> l(mu);
          times.push_back(dt);
          cpu.push_back(dc);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return {Median(times), Median(cpu)};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t hidden = argc > 1 ? std::atoll(argv[1]) : 128;
  const int layers = argc > 2 ? std::atoi(argv[2]) : 2;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 5;
  const std::vector<int> worlds = Ints(argc > 4 ? argv[4] : "1,2,4");
  const std::vector<int> stages = Ints(argc > 5 ? argv[5] : "1,2,3");
  const std::vector<Shape> model = Blocks(hidden, layers);
  for (int world : worlds) {
    for (int stage : stages) {
      zero::Config c;
      c.stage = stage;
      c.dtype = zero::DType::kF32;
      c.steps_per_print = 0;
      c.comm_timeout_seconds = 600;
      c.lr = 1e-3;
      zero::Config adamw = c;
      c.optimizer = zero::OptimizerType::kMuon;
      c.muon_lr = 0.02;
      c.adam_lr = 1e-3;
      const Timing muon = MedianStep(c, world, model, steps);
      const Timing adam = MedianStep(adamw, world, model, steps);
      std::printf(
          "{\"bench\": \"muon_phase\", \"hidden\": %lld, \"layers\": %d, \"world\": %d, "
          "\"stage\": %d, \"muon_step_ms\": %.3f, \"adamw_step_ms\": %.3f, "
          "\"muon_phase_ms\": %.3f, \"muon_step_cpu_ms\": %.3f, \"adamw_step_cpu_ms\": %.3f, "
          "\"muon_phase_cpu_ms\": %.3f}\n",
          static_cast<long long>(hidden), layers, world, stage, muon.wall * 1e3, adam.wall * 1e3,
          (muon.wall - adam.wall) * 1e3, muon.cpu * 1e3, adam.cpu * 1e3,
          (muon.cpu - adam.cpu) * 1e3);
      std::fflush(stdout);
    }
  }
  return 0;
}
