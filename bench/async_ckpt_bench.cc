// Asynchronous vs synchronous checkpoints (docs/ARCHITECTURE.md,
// "Asynchronous checkpoints"): how long save() holds the training thread.
// A stage-3 AdamW engine of --params fp32 params in 8 tensors on --world
// thread ranks takes a step, then alternately saves synchronously and
// asynchronously to --dir (a fresh tag each time, keep_last 2). For each
// save, rank 0's JSON line: the seconds save() blocked, the snapshot copy
// alone (async), the background write (async, measured when waited for,
// with one training step run meanwhile) or the whole save (sync). A
// summary line gives the medians and the two ratios the design promises:
// blocking / snapshot (about 1) and blocking / synchronous save (small).
// The first async save allocates and first touches the snapshot buffer
// (reused from then on): it is reported apart and left out of the medians.
//
//   async_ckpt_bench --params 100000000 --world 2 --saves 3 --dir /tmp/ck
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_clock.h"
#include "core/ckpt/file_util.h"
#include "core/comm/thread_communicator.h"
#include "core/config/config.h"
#include "core/engine/engine.h"

namespace {

constexpr int kTensors = 8;

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "async_ckpt_bench: %s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

using zero::bench::WallSeconds;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void Step(zero::Engine& e, const std::vector<int>& ids, int64_t per) {
  for (int id : ids) {
    auto buf = e.GradBuffer(id);
    Check(buf.status(), "grad_buffer");
    std::fill_n(static_cast<float*>(*buf), per, 1e-3f);
    Check(e.GradReady(id), "grad_ready");
  }
  Check(e.Step().status(), "step");
}

}  // namespace

int main(int argc, char** argv) {
  int64_t params = 100000000;
  int world = 2, saves = 4;
  std::string dir = "/tmp/zero_async_ckpt_bench";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--params") params = std::atoll(argv[i + 1]);
    else if (k == "--world") world = std::atoi(argv[i + 1]);
    else if (k == "--saves") saves = std::atoi(argv[i + 1]);
    else if (k == "--dir") dir = argv[i + 1];
  }
  Check(zero::ckpt::RemoveTree(dir), "clean dir");
  const int64_t per = params / kTensors;
  zero::Config c;
  c.stage = 3;
  c.steps_per_print = 0;
  c.stage3_param_persistence_threshold = 0;
  auto comms = zero::MakeThreadCommunicators(world);
  std::vector<double> sync_s, async_s, snap_s, write_s, step_s, step_during_s;
  double first_async_s = 0;
  std::vector<std::thread> th;
  for (int r = 0; r < world; ++r) {
    th.emplace_back([&, r] {
      auto made = zero::Engine::Create(c, comms[r].get());
      Check(made.status(), "create");
      zero::Engine& e = **made;
      std::vector<int> ids;
      for (int k = 0; k < kTensors; ++k) {
        zero::ParamSpec p;
        p.name = "w" + std::to_string(k);
        p.shape = {per};
        auto id = e.RegisterParam(p);
        Check(id.status(), "register");
        ids.push_back(*id);
      }
      Check(e.Finalize(), "finalize");
      Step(e, ids, per);
      for (int i = 0; i < 2 * saves; ++i) {
        const bool async = i % 2 == 1;
        zero::ckpt::SaveOptions o;
        o.async = async;
        o.keep_last = 2;
        const std::string tag = "t" + std::to_string(i);
        const double t0 = WallSeconds();
        Check(e.Save(dir, tag, o), "save");
        const double blocked = WallSeconds() - t0;
        const zero::ckpt::SaveTiming after_save = e.LastCheckpointTiming();
        // Training goes on while the background write runs.
        const double s0 = WallSeconds();
        Step(e, ids, per);
        const double step = WallSeconds() - s0;
        Check(e.WaitForCheckpoint(), "wait");
        const zero::ckpt::SaveTiming t = e.LastCheckpointTiming();
        if (r != 0) continue;
        const double bytes = static_cast<double>(params) * 12;  // master, m, v (fp32)
        if (async && first_async_s == 0) {
          first_async_s = blocked;
        } else if (async) {
          async_s.push_back(blocked);
          snap_s.push_back(after_save.snapshot_seconds);
          write_s.push_back(t.write_seconds);
          step_during_s.push_back(step);
        } else {
          sync_s.push_back(blocked);
          step_s.push_back(step);
        }
        std::printf("{\"bench\": \"async_ckpt\", \"params\": %lld, \"world\": %d, \"stage\": 3, "
                    "\"mode\": \"%s\", \"tag\": \"%s\", \"blocking_s\": %.4f, "
                    "\"snapshot_s\": %.4f, \"background_write_s\": %.4f, "
                    "\"next_step_s\": %.4f, \"state_bytes\": %.0f}\n",
                    static_cast<long long>(params), world, async ? "async" : "sync",
                    tag.c_str(), blocked, async ? after_save.snapshot_seconds : 0.0,
                    async ? t.write_seconds : 0.0, step, bytes);
        std::fflush(stdout);
      }
    });
  }
  for (auto& t : th) t.join();
  const double a = Median(async_s), s = Median(sync_s), snap = Median(snap_s);
  std::printf("{\"bench\": \"async_ckpt\", \"summary\": true, \"params\": %lld, \"world\": %d, "
              "\"stage\": 3, \"sync_save_s\": %.4f, \"first_async_blocking_s\": %.4f, "
              "\"async_blocking_s\": %.4f, "
              "\"snapshot_s\": %.4f, \"background_write_s\": %.4f, \"step_s\": %.4f, "
              "\"step_during_write_s\": %.4f, \"blocking_over_snapshot\": %.3f, "
              "\"blocking_over_sync\": %.3f}\n",
              static_cast<long long>(params), world, s, first_async_s, a, snap, Median(write_s),
              Median(step_s), Median(step_during_s), snap > 0 ? a / snap : 0.0,
              s > 0 ? a / s : 0.0);
  return 0;
}
