// The optimizer boundary against the Adam kernel alone on the same shard
// (the step at the machine's limit). For each stage 1-3 x fp32 /
// bf16 / fp16, two engines over the same model run side by side in one
// process, step for step: the two-pass boundary (fused, the default) and
// the separate cast / norm / update / zeroing passes it replaced
// (Config::engine_paths.fused_boundary false); both give the same bits. Reports per config
// the boundary's time (Engine::Step at gradient_accumulation_steps 1, every
// bucket already reduced in grad_ready: overlap_comm off, one param per
// bucket; so Step is the boundary, plus stage 1's reduce-scatter of the full
// gradient, which is its design, and the publishing all-gather) and
// cpu::AdamStep over arrays of the owned shard's size writing the same
// working dtype; each the fastest of `steps` runs, in wall time and (one
// rank, one kernel thread) the calling thread's CPU time. Thread ranks
// (default 1).
// `pieces_ms`: the boundary's phases (wall_clock_breakdown) in the fastest
// fused step: stage 0-1 reduction, norm (cast + sum of squares +
// all-reduce), update (optimizer + working-copy cast + gradient zeroing),
// publish (all-gather of the working copy). `sumsq_kernel_cpu_ms`:
// cpu::SumSquares alone over an owned-size array of the working dtype.
// `backward_ms` / `backward_cpu_ms`: rank 0's wall / thread CPU time from its
// first grad_buffer to its last grad_ready, the gradients written and every
// bucket reduced (overlap_comm off: on the calling thread): the gradient
// path. At more than one rank stage 0 runs too (its reduction is all there).
// JSON lines; noisy on a shared machine: compare ratios within one run.
//
// Usage: boundary_bench [params=4e6] [steps=7] [world=1] [offload] [one_thread]
//   offload: offload_optimizer "cpu" state (on the CPU device: the same
//   in-memory store, so the same numbers).
//   one_thread: one kernel thread at any world (always at world 1), so each
//   rank's thread CPU time covers every pass it makes.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_clock.h"
#include "core/comm/thread_communicator.h"
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/engine/optimizer_boundary.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/cpu_kernels.h"

namespace {

// Thread CPU time: at world 1 with one kernel thread every pass runs on the
// calling thread, so it is what the passes cost whatever else the machine runs.
using zero::bench::ThreadCpuSeconds;
using zero::bench::WallSeconds;

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "boundary_bench: %s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

constexpr int kParams = 8;

struct Rank {
  std::unique_ptr<zero::Engine> engine;
  std::vector<int> ids;
};

// One engine per thread rank over `comms`.
std::vector<Rank> MakeEngines(const zero::Config& c,
                              std::vector<std::unique_ptr<zero::Communicator>>& comms,
                              int64_t per) {
  std::vector<Rank> ranks(comms.size());
  std::vector<std::thread> th;
  for (size_t r = 0; r < comms.size(); ++r) {
    th.emplace_back([&, r] {
      auto e = zero::Engine::Create(c, comms[r].get());
      Check(e.status(), "create");
      ranks[r].engine = std::move(*e);
      for (int k = 0; k < kParams; ++k) {
        zero::ParamSpec p;
        p.name = "w" + std::to_string(k);
        p.shape = {per};
        p.dtype = c.dtype;
        auto id = ranks[r].engine->RegisterParam(p);
        Check(id.status(), "register");
        ranks[r].ids.push_back(*id);
      }
      Check(ranks[r].engine->Finalize(), "finalize");
    });
  }
  for (auto& t : th) t.join();
  return ranks;
}

// One step on every rank; returns rank 0's Step() seconds (and its thread
// CPU seconds in *cpu; with wall_clock_breakdown, its pieces in *pieces).
struct Pieces {
  double reduce = 0, norm = 0, update = 0, publish = 0;
};
// `bwd`: rank 0's wall and thread CPU seconds from its first grad_buffer to
// its last grad_ready (writing the gradients and, overlap_comm off, every
// bucket's reduction: the gradient path).
struct Backward {
  double wall = 0, cpu = 0;
};
double OneStep(std::vector<Rank>& ranks, zero::DType t, int64_t per, double* cpu,
               Pieces* pieces = nullptr, Backward* bwd = nullptr) {
  std::vector<double> secs(ranks.size()), cpus(ranks.size());
  std::vector<Backward> bwds(ranks.size());
  std::vector<std::thread> th;
  for (size_t r = 0; r < ranks.size(); ++r) {
    th.emplace_back([&, r] {
      zero::Engine& e = *ranks[r].engine;
      const double b_c0 = ThreadCpuSeconds();
      const double b_t0 = WallSeconds();
      for (int id : ranks[r].ids) {
        auto buf = e.GradBuffer(id);
        Check(buf.status(), "grad_buffer");
        const float g = 1e-3f * static_cast<float>(r + 1);
        if (t == zero::DType::kF32) {
          std::fill_n(static_cast<float*>(*buf), per, g);
        } else {
          const uint16_t h = t == zero::DType::kBF16 ? zero::math::FloatToBf16(g)
                                                      : zero::math::FloatToHalf(g);
          std::fill_n(static_cast<uint16_t*>(*buf), per, h);
        }
        Check(e.GradReady(id), "grad_ready");
      }
      bwds[r] = {WallSeconds() - b_t0, ThreadCpuSeconds() - b_c0};
      const double c0 = ThreadCpuSeconds();
      const double t0 = WallSeconds();
      auto info = e.Step();
      secs[r] = WallSeconds() - t0;
      cpus[r] = ThreadCpuSeconds() - c0;
      Check(info.status(), "step");
    });
  }
  for (auto& x : th) x.join();
  *cpu = cpus[0];
  if (bwd != nullptr) *bwd = bwds[0];
  if (pieces != nullptr && ranks[0].engine->recorder() != nullptr) {
    const zero::StepBreakdown& b = ranks[0].engine->recorder()->last();
    *pieces = {b.at(zero::Phase::kBoundaryReduce), b.at(zero::Phase::kNorm),
               b.at(zero::Phase::kUpdate), b.at(zero::Phase::kPublish)};
  }
  return secs[0];
}

// The fastest run: on a shared machine the least disturbed one.
double Best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

int main(int argc, char** argv) {
  const int64_t total = argc > 1 ? static_cast<int64_t>(std::atof(argv[1])) : 4000000;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 7;
  const int world = argc > 3 ? std::atoi(argv[3]) : 1;
  bool offload = false, one_thread = world == 1;
  for (int a = 4; a < argc; ++a) {
    offload = offload || std::string(argv[a]) == "offload";
    one_thread = one_thread || std::string(argv[a]) == "one_thread";
  }
  const int64_t per = total / kParams;
  // One rank: one kernel thread, so the thread CPU times cover every pass.
  if (one_thread) zero::cpu::SetThreads(1);
  // Stage 0 only where it reduces (more than one rank): its boundary is the
  // boundary micro-step's bucket all-reduces, in backward_ms.
  for (int stage = world > 1 ? 0 : 1; stage <= 3; ++stage) {
    for (zero::DType t : {zero::DType::kF32, zero::DType::kBF16, zero::DType::kF16}) {
      zero::Config c;
      c.stage = stage;
      c.dtype = t;
      c.steps_per_print = 0;
      c.overlap_comm = false;
      c.reduce_bucket_size = per;
      c.allgather_bucket_size = total;
      c.stage3_param_persistence_threshold = 0;
      c.stage3_prefetch_bucket_size = 0;
      c.loss_scale = t == zero::DType::kF16 ? 1024.0 : 0.0;
      if (offload) c.offload_optimizer.device = zero::OffloadDevice::kCpu;
      auto comms_a = zero::MakeThreadCommunicators(world);
      auto comms_b = zero::MakeThreadCommunicators(world);
      zero::Config separate_config = c;
      separate_config.engine_paths.fused_boundary = false;
      std::vector<Rank> separate = MakeEngines(separate_config, comms_b, per);
      // Per-piece times of the fused boundary (a clock read per phase).
      c.observe.wall_clock_breakdown = true;
      std::vector<Rank> fused = MakeEngines(c, comms_a, per);
      const int64_t owned = (total + world - 1) / world;
      // The Adam kernel alone on arrays of the owned shard's size.
      std::vector<float> g(owned, 1e-3f), p(owned, 0.5f), m(owned), v(owned);
      std::vector<char> w(owned * zero::DTypeSize(t));
      const zero::math::AdamScalars as =
          zero::math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, true, 1, 1.0f);
      std::vector<double> tf, ts, ta, cf, cs, ca, cn, bw, bc;
      Pieces best_pieces;
      double best_fused = 1e30;
      for (int k = 0; k < steps + 2; ++k) {
        double a_cpu, b_cpu;
        Pieces pieces;
        Backward bwd;
        const double a = OneStep(fused, t, per, &a_cpu, &pieces, &bwd);
        const double b = OneStep(separate, t, per, &b_cpu);
        const double c0 = ThreadCpuSeconds();
        const double t0 = WallSeconds();
        zero::cpu::AdamStep(as, g.data(), p.data(), m.data(), v.data(), owned, w.data(), t);
        const double k_s = WallSeconds() - t0;
        const double k_cpu = ThreadCpuSeconds() - c0;
        // Pass 1's kernel alone: the sum of squares over the owned shard in
        // the working dtype (the working copy Adam just wrote).
        const double n0 = ThreadCpuSeconds();
        volatile double sink = zero::cpu::SumSquares(w.data(), t, owned);
        (void)sink;
        const double n_cpu = ThreadCpuSeconds() - n0;
        if (k < 2) continue;  // warm-up
        if (a < best_fused) {
          best_fused = a;
          best_pieces = pieces;
        }
        tf.push_back(a);
        ts.push_back(b);
        ta.push_back(k_s);
        cf.push_back(a_cpu);
        cs.push_back(b_cpu);
        ca.push_back(k_cpu);
        cn.push_back(n_cpu);
        bw.push_back(bwd.wall);
        bc.push_back(bwd.cpu);
      }
      const double f = Best(tf), s = Best(ts), ad = Best(ta);
      const double fc = Best(cf), sc = Best(cs), ac = Best(ca), nc = Best(cn);
      std::printf(
          "{\"bench\":\"boundary\",\"stage\":%d,\"dtype\":\"%s\",\"world\":%d,\"offload\":%s,"
          "\"one_thread\":%s,"
          "\"params\":%lld,\"owned\":%lld,\"boundary_ms\":%.3f,\"separate_passes_ms\":%.3f,"
          "\"adam_kernel_ms\":%.3f,\"boundary_vs_adam\":%.2f,\"separate_vs_adam\":%.2f,"
          "\"speedup\":%.2f,\"boundary_cpu_ms\":%.3f,\"separate_cpu_ms\":%.3f,"
          "\"adam_cpu_ms\":%.3f,\"boundary_vs_adam_cpu\":%.2f,\"separate_vs_adam_cpu\":%.2f,"
          "\"speedup_cpu\":%.2f,\"pieces_ms\":{\"boundary_reduce\":%.3f,\"norm\":%.3f,"
          "\"update\":%.3f,\"publish\":%.3f},\"sumsq_kernel_cpu_ms\":%.3f,"
          "\"backward_ms\":%.3f,\"backward_cpu_ms\":%.3f}\n",
          stage, zero::DTypeName(t), world, offload ? "true" : "false",
          one_thread ? "true" : "false",
          static_cast<long long>(total), static_cast<long long>(owned), f * 1e3, s * 1e3,
          ad * 1e3, f / ad, s / ad, s / f, fc * 1e3, sc * 1e3, ac * 1e3, fc / ac, sc / ac,
          sc / fc, best_pieces.reduce, best_pieces.norm, best_pieces.update, best_pieces.publish,
          nc * 1e3, Best(bw) * 1e3, Best(bc) * 1e3);
      std::fflush(stdout);
    }
  }
  return 0;
}
