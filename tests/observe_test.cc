// Observing a run: the per-step breakdown (wall_clock_breakdown)
// against the caller's own clock, the collective log (comms_logger) against
// the traffic counters, the trace (zero_trace) parsed as JSON with its
// reduction spans overlapping backward spans under overlap_comm, and none of
// them changing a bit of training.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/common/status_macros.h"
#include "core/engine/engine.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

using Clock = std::chrono::steady_clock;

// Busy compute standing in for a model's forward/backward math.
void Compute(double ms) {
  const auto end = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(ms * 1000));
  volatile double x = 1;
  while (Clock::now() < end) x = x * 1.0000001 + 1e-9;
}

struct RunOut {
  std::vector<StepBreakdown> steps;  // one per optimizer step
  std::vector<double> wall_ms;       // the caller's clock for the same steps
  EngineStats stats;
  std::vector<CommLogEntry> log;
  std::vector<std::vector<float>> params;
  std::string trace_file;
};

constexpr int kLayers = 6;
constexpr int64_t kWidth = 4096;  // elements per layer weight

Config BaseConfig(int stage) {
  Config c;
  c.stage = stage;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 60;
  c.reduce_bucket_size = kWidth;  // a bucket per layer: reductions during backward
  c.stage3_prefetch_bucket_size = kWidth;
  c.stage3_param_persistence_threshold = 100;
  c.overlap_comm = 1;
  c.gradient_accumulation_steps = 2;
  c.lr = 1e-3;
  return c;
}

// `steps` optimizer steps of a layered model: forward gathers each layer
// and computes, backward computes and hands in each layer's gradient.
absl::StatusOr<RunOut> Run(const Config& c, Communicator* comm, int steps, double compute_ms) {
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Create(c, comm));
  for (int l = 0; l < kLayers; ++l) {
    ParamSpec w;
    w.name = "layer" + std::to_string(l) + ".w";
    w.shape = {64, kWidth / 64};
    std::vector<float> init(kWidth);
    for (int64_t k = 0; k < kWidth; ++k) init[k] = 0.01f * static_cast<float>((k * 7 + l) % 13);
    w.init = init.data();
    RETURN_IF_ERROR(e->RegisterParam(w).status());
    ParamSpec b;
    b.name = "layer" + std::to_string(l) + ".b";
    b.shape = {64};
    RETURN_IF_ERROR(e->RegisterParam(b).status());
  }
  RETURN_IF_ERROR(e->Finalize());
  const int n = e->num_params();
  const int gas = static_cast<int>(e->config().gradient_accumulation_steps);
  RunOut out;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = Clock::now();
    for (int m = 0; m < gas; ++m) {
      for (int id = 0; id < n; ++id) {
        RETURN_IF_ERROR(e->Gather(id).status());
        Compute(compute_ms);
        RETURN_IF_ERROR(e->Release(id));
      }
      for (int id = n - 1; id >= 0; --id) {
        RETURN_IF_ERROR(e->Gather(id).status());
        Compute(compute_ms);
        ASSIGN_OR_RETURN(void* g, e->GradBuffer(id));
        ASSIGN_OR_RETURN(int64_t numel, e->ParamNumel(id));
        float* gf = static_cast<float*>(g);
        for (int64_t k = 0; k < numel; ++k) gf[k] = 1e-3f * static_cast<float>((k + id + s) % 5);
        RETURN_IF_ERROR(e->GradReady(id));
        RETURN_IF_ERROR(e->Release(id));
      }
      ASSIGN_OR_RETURN(StepInfo info, e->Step());
      (void)info;
    }
    out.wall_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (e->recorder()) out.steps.push_back(e->recorder()->last());
  }
  out.stats = e->Stats();
  if (e->comm_log()) out.log = e->comm_log()->Entries();
  for (int id = 0; id < n; ++id) {
    ASSIGN_OR_RETURN(int64_t numel, e->ParamNumel(id));
    std::vector<float> v(numel);
    RETURN_IF_ERROR(e->ReadMaster(id, v.data()));
    out.params.push_back(std::move(v));
  }
  if (e->recorder()) out.trace_file = e->recorder()->trace_file();
  return out;
}

std::vector<RunOut> RunAll(const Config& c, int world, int steps, double compute_ms) {
  std::vector<RunOut> outs(world);
  std::mutex mu;
  RunThreads(world, [&](int rank, Communicator* comm) {
    auto r = Run(c, comm, steps, compute_ms);
    std::lock_guard<std::mutex> l(mu);
    EXPECT_TRUE(r.ok()) << "rank " << rank << ": " << r.status();
    if (r.ok()) outs[rank] = std::move(*r);
  });
  return outs;
}

class BreakdownTest : public ::testing::TestWithParam<int> {};

// Forward + backward + step tile the caller's step: within 5 % of its clock.
TEST_P(BreakdownTest, PhasesSumToTheStepTime) {
  Config c = BaseConfig(GetParam());
  c.observe.wall_clock_breakdown = true;
  const auto outs = RunAll(c, 2, 3, 0.3);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(outs[r].steps.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      const StepBreakdown& b = outs[r].steps[s];
      const double sum = b.at(Phase::kForward) + b.at(Phase::kBackward) + b.at(Phase::kStep);
      const double wall = outs[r].wall_ms[s];
      EXPECT_EQ(b.global_step, static_cast<int64_t>(s) + 1);
      EXPECT_EQ(b.micro_steps, 2);
      EXPECT_NEAR(sum, wall, 0.05 * wall) << "rank " << r << " step " << s;
      EXPECT_NEAR(b.step_ms, wall, 0.05 * wall) << "rank " << r << " step " << s;
      // The compute the caller did in each phase is inside it.
      EXPECT_GE(b.at(Phase::kForward), 2 * 2 * kLayers * 0.3 * 0.95);
      // Backward begins at the first gradient handed in (the recorder cannot
      // know earlier), so the first backward param's compute of each
      // micro-step falls in forward.
      EXPECT_GE(b.at(Phase::kBackward), 2 * (2 * kLayers - 1) * 0.3 * 0.95);
      // Pieces of the step lie inside it; reductions happened.
      EXPECT_GT(b.at(Phase::kReduce), 0);
      EXPECT_LE(b.at(Phase::kUpdate) + b.at(Phase::kPublish) + b.at(Phase::kNorm),
                b.at(Phase::kStep));
      EXPECT_LE(b.reduce_hidden_ms(), b.at(Phase::kReduce));
      if (GetParam() == 3) { EXPECT_GT(b.at(Phase::kGather), 0); }
      EXPECT_EQ(b.at(Phase::kNvmeBusy), 0);  // no NVMe tier
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, BreakdownTest, ::testing::Values(0, 1, 2, 3));

// Optimizer state on NVMe: the step's reads and writes are timed, lie inside
// the optimizer step (the caller's clock), and the time the caller waited
// for them is inside both; bytes as the tier counts them.
TEST(BreakdownNvmeTest, IoTimeInsideTheStep) {
  for (int stage : {1, 3}) {
    Config c = BaseConfig(stage);
    c.observe.wall_clock_breakdown = true;
    const char* tmp = std::getenv("TEST_TMPDIR");
    c.offload_optimizer.device = OffloadDevice::kNvme;
    c.offload_optimizer.nvme_path = tmp ? tmp : "/tmp";
    c.offload_optimizer.buffer_count = 3;
    c.sub_group_size = 2048;  // a few chunks per rank: a pipeline
    const auto outs = RunAll(c, 2, 3, 0.1);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(outs[r].steps.size(), 3u);
      int64_t read = 0, written = 0;
      for (size_t s = 0; s < 3; ++s) {
        const StepBreakdown& b = outs[r].steps[s];
        read += b.nvme_read_bytes;
        written += b.nvme_write_bytes;
        EXPECT_GT(b.at(Phase::kNvmeRead), 0) << "rank " << r << " step " << s;
        EXPECT_GT(b.at(Phase::kNvmeWrite), 0) << "rank " << r << " step " << s;
        const double busy = b.at(Phase::kNvmeBusy);
        EXPECT_GE(busy + 1e-6, std::max(b.at(Phase::kNvmeRead), b.at(Phase::kNvmeWrite)));
        EXPECT_LE(busy, b.at(Phase::kNvmeRead) + b.at(Phase::kNvmeWrite) + 1e-6);
        // Waits run from after a submit to the completion: inside the busy spans.
        EXPECT_LE(b.at(Phase::kNvmeExposed), busy + 1e-6);
        EXPECT_NEAR(b.nvme_hidden_ms() + b.at(Phase::kNvmeExposed), busy, 1e-6);
        if (s == 0) continue;  // step 1 also holds the state's first write (Finalize)
        EXPECT_LE(busy, b.at(Phase::kStep)) << "rank " << r << " step " << s;
        EXPECT_LE(b.at(Phase::kNvmeExposed), b.at(Phase::kStep));
      }
      EXPECT_EQ(read, outs[r].stats.nvme_read_bytes);
      EXPECT_EQ(written, outs[r].stats.nvme_write_bytes);
    }
  }
}

// The log's bytes per kind equal the counters exactly; turning it (and the
// breakdown and trace) on changes neither the traffic nor a bit of training.
TEST(CommsLogTest, TotalsEqualTrafficCounters) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {2, 3}) {
      Config off = BaseConfig(stage);
      Config on = off;
      on.observe.comms_logger = true;
      on.observe.wall_clock_breakdown = true;
      const auto a = RunAll(off, world, 2, 0);
      const auto b = RunAll(on, world, 2, 0);
      for (int r = 0; r < world; ++r) {
        const EngineStats& s = b[r].stats;
        int64_t per_kind[static_cast<int>(CollectiveKind::kCount)] = {};
        int64_t calls = 0;
        for (const CommLogEntry& e : b[r].log) {
          per_kind[static_cast<int>(e.kind)] += e.sent_bytes;
          calls += e.count;
          EXPECT_GT(e.total_ms, 0);
          EXPECT_LE(e.bytes, e.count * e.bucket_bytes);
          EXPECT_GT(e.bytes, e.count * e.bucket_bytes / 2 - e.count);
        }
        for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
          EXPECT_EQ(per_kind[k], s.sent_bytes[k]) << "stage " << stage << " kind " << k;
          EXPECT_EQ(a[r].stats.sent_bytes[k], s.sent_bytes[k]) << "stage " << stage;
        }
        EXPECT_EQ(calls, s.collective_calls);
        EXPECT_EQ(a[r].stats.collective_calls, s.collective_calls);
        EXPECT_EQ(a[r].params, b[r].params) << "stage " << stage << " rank " << r;
      }
    }
  }
}

// Bandwidths as nccl-tests defines them, from an entry's own numbers.
TEST(CommsLogTest, BandwidthDefinitions) {
  CommLog log(0, 4, {});
  log.Record(CollectiveOp::kAllReduce, CollectiveKind::kAllReduce, 1000000, 1500000, 0.001);
  log.Record(CollectiveOp::kAllGather, CollectiveKind::kAllGather, 1000000, 750000, 0.002);
  const auto es = log.Entries();
  ASSERT_EQ(es.size(), 2u);
  for (const CommLogEntry& e : es) {
    if (e.op == CollectiveOp::kAllReduce) {
      EXPECT_DOUBLE_EQ(e.algbw_gbs(), 1.0);        // 1e6 B in 1 ms
      EXPECT_DOUBLE_EQ(e.busbw_gbs(4), 1.5);       // x 2(W-1)/W
      EXPECT_EQ(e.bucket_bytes, 1 << 20);
    } else {
      EXPECT_DOUBLE_EQ(e.algbw_gbs(), 0.5);
      EXPECT_DOUBLE_EQ(e.busbw_gbs(4), 0.375);     // x (W-1)/W
    }
  }
  EXPECT_NE(log.Summary().find("all_reduce"), std::string::npos);
  CommLog only(0, 2, {false, false, {"all_gather"}});
  EXPECT_TRUE(only.Wanted(CollectiveOp::kAllGather));
  EXPECT_FALSE(only.Wanted(CollectiveOp::kAllReduce));
}

// The trace is JSON in the trace-event format; with overlap_comm a bucket's
// reduction (on the comm stream's thread) runs while the caller is in
// backward; only the steps asked for are in it.
TEST(TraceTest, ValidJsonAndReductionsOverlapBackward) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  Config c = BaseConfig(2);
  c.observe.trace_path = std::string(tmp ? tmp : "/tmp") + "/zero_trace_{rank}.json";
  c.observe.trace_start_step = 1;
  c.observe.trace_end_step = 3;
  const auto outs = RunAll(c, 2, 4, 0.5);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(outs[r].trace_file,
              std::string(tmp ? tmp : "/tmp") + "/zero_trace_" + std::to_string(r) + ".json");
    std::ifstream f(outs[r].trace_file);
    ASSERT_TRUE(f.good()) << outs[r].trace_file;
    std::stringstream ss;
    ss << f.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(ss.str());  // throws on invalid JSON
    ASSERT_TRUE(j.contains("traceEvents"));
    struct Span {
      double ts, end;
      int tid;
    };
    std::vector<Span> backward, reduce;
    int forward = 0, collectives = 0, caller_tid = -1;
    std::set<std::string> thread_names;
    for (const auto& ev : j["traceEvents"]) {
      ASSERT_TRUE(ev.contains("ph") && ev.contains("pid") && ev.contains("name"));
      EXPECT_EQ(ev["pid"].get<int>(), r);
      if (ev["ph"] == "M") {
        if (ev["name"] == "thread_name") {
          thread_names.insert(ev["args"]["name"].get<std::string>());
          if (ev["args"]["name"] == "caller") caller_tid = ev["tid"].get<int>();
        }
        continue;
      }
      ASSERT_EQ(ev["ph"], "X");
      const double ts = ev["ts"].get<double>(), dur = ev["dur"].get<double>();
      EXPECT_GE(dur, 0);
      const std::string cat = ev["cat"].get<std::string>();
      if (cat == "backward") backward.push_back({ts, ts + dur, ev["tid"].get<int>()});
      if (cat == "reduce") reduce.push_back({ts, ts + dur, ev["tid"].get<int>()});
      if (cat == "forward") ++forward;
      if (cat == "collective") ++collectives;
    }
    EXPECT_TRUE(thread_names.count("caller"));
    EXPECT_EQ(forward, 2 * 2) << "steps 1 and 2, 2 micro-steps each";
    EXPECT_EQ(backward.size(), 4u);
    EXPECT_GT(collectives, 0);
    ASSERT_FALSE(reduce.empty());
    int overlapping = 0;
    for (const Span& red : reduce) {
      EXPECT_NE(red.tid, caller_tid) << "overlap_comm reduces on the comm stream";
      for (const Span& bw : backward) {
        if (red.ts < bw.end && bw.ts < red.end) ++overlapping;
      }
    }
    EXPECT_GT(overlapping, 0) << "no reduction span overlaps a backward span";
  }
}

// NVMe IO in the trace: read and write spans on the tier's IO thread, every
// wait span inside the merged IO spans, no span for the busy union itself.
TEST(TraceTest, NvmeSpansOnTheIoThread) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  Config c = BaseConfig(1);
  c.offload_optimizer.device = OffloadDevice::kNvme;
  c.offload_optimizer.nvme_path = dir;
  c.offload_optimizer.buffer_count = 3;
  c.sub_group_size = 2048;
  c.observe.trace_path = dir + "/zero_nvme_trace_{rank}.json";
  c.observe.trace_start_step = 1;
  c.observe.trace_end_step = 3;
  const auto outs = RunAll(c, 2, 4, 0.1);
  for (int r = 0; r < 2; ++r) {
    std::ifstream f(outs[r].trace_file);
    ASSERT_TRUE(f.good()) << outs[r].trace_file;
    std::stringstream ss;
    ss << f.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(ss.str());
    int io_tid = -1;
    std::vector<std::pair<double, double>> io, waits;
    std::set<int> io_tids;
    for (const auto& ev : j["traceEvents"]) {
      if (ev["ph"] == "M") {
        if (ev["name"] == "thread_name" && ev["args"]["name"] == "nvme io") {
          io_tid = ev["tid"].get<int>();
        }
        continue;
      }
      const std::string cat = ev["cat"].get<std::string>();
      const double ts = ev["ts"].get<double>(), end = ts + ev["dur"].get<double>();
      EXPECT_NE(cat, "nvme_busy");
      if (cat == "nvme_read" || cat == "nvme_write") {
        io.push_back({ts, end});
        io_tids.insert(ev["tid"].get<int>());
      }
      if (cat == "nvme_exposed") waits.push_back({ts, end});
    }
    ASSERT_GE(io_tid, 0) << "no 'nvme io' thread in rank " << r << "'s trace";
    EXPECT_EQ(io_tids, std::set<int>{io_tid}) << "IO spans close on the IO thread";
    ASSERT_FALSE(io.empty());
    std::sort(io.begin(), io.end());
    std::vector<std::pair<double, double>> merged;
    for (const auto& s : io) {
      if (!merged.empty() && s.first <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, s.second);
      } else {
        merged.push_back(s);
      }
    }
    for (const auto& w : waits) {
      bool inside = false;
      for (const auto& m : merged) inside |= m.first <= w.first + 1e-3 && w.second <= m.second + 1e-3;
      EXPECT_TRUE(inside) << "wait [" << w.first << ", " << w.second << ") outside the IO spans";
    }
  }
}

// DeepSpeed's timer line every steps_per_print, on rank 0.
TEST(BreakdownPrint, DeepSpeedFormat) {
  Config c = BaseConfig(1);
  c.observe.wall_clock_breakdown = true;
  c.steps_per_print = 2;
  ::testing::internal::CaptureStdout();
  RunAll(c, 2, 4, 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  size_t lines = 0;
  for (size_t p = out.find("[Rank 0] time (ms) | fwd: "); p != std::string::npos;
       p = out.find("[Rank 0] time (ms) | fwd: ", p + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u) << out;
  EXPECT_NE(out.find("| bwd_allreduce: "), std::string::npos) << out;
  EXPECT_NE(out.find("[Rank 0] zero step 2 (2 micro-steps"), std::string::npos) << out;
  EXPECT_NE(out.find("| nvme read/write: 0.0/0.0 MB in 0.00/0.00 ms (exposed 0.00, hidden 0.00)"),
            std::string::npos) << out;
  EXPECT_EQ(out.find("[Rank 1]"), std::string::npos) << out;
}

}  // namespace
}  // namespace testing
}  // namespace zero
