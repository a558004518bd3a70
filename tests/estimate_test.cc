// The memory estimator (core/estimate) against what engines measure: zero_stats
// categories after one optimizer step, and the bytes an off-host device
// really holds, at stages 0-3 x fp32/fp16/bf16 x offload none/cpu/nvme x
// worlds 2 and 3 (72 cases) plus stage 3's offload_param nvme and cpu, and
// offload_optimizer cpu with delayed_update at stages 1-3; within 2 %.
// DeepSpeed's formulas against the table DeepSpeed prints for t5-small.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/comm/thread_communicator.h"
#include "core/common/status_macros.h"
#include "core/engine/engine.h"
#include "core/estimate/memory_estimate.h"
#include "tests/testing/measure_ranks.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

// A small GPT-shaped model: names, shapes, trainable. hidden 56, 2 layers,
// vocab 97 (odd sizes: params straddle shards and sub-groups), one frozen
// param. Large enough that the CPU allocator's 64-byte rounding of each
// buffer (which the estimate does not model) stays under 1 %.
struct Model {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<bool> trainable;
};

Model SmallGpt() {
  Model m;
  const int64_t h = 56;
  auto add = [&](const std::string& n, std::vector<int64_t> s, bool t = true) {
    m.names.push_back(n);
    m.shapes.push_back(std::move(s));
    m.trainable.push_back(t);
  };
  add("wte", {97, h});
  add("wpe", {16, h}, false);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "h" + std::to_string(l) + ".";
    add(p + "ln1.w", {h}), add(p + "ln1.b", {h});
    add(p + "qkv.w", {3 * h, h}), add(p + "qkv.b", {3 * h});
    add(p + "proj.w", {h, h}), add(p + "proj.b", {h});
    add(p + "ln2.w", {h}), add(p + "ln2.b", {h});
    add(p + "fc.w", {4 * h, h}), add(p + "fc.b", {4 * h});
    add(p + "fc2.w", {h, 4 * h}), add(p + "fc2.b", {h});
  }
  add("lnf.w", {h}), add("lnf.b", {h});
  return m;
}

std::vector<EstimateParam> EstimateInput(const Model& m, DType frozen_dtype) {
  std::vector<EstimateParam> out;
  for (size_t i = 0; i < m.names.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : m.shapes[i]) n *= d;
    const std::vector<int64_t>& sh = m.shapes[i];
    out.push_back({n, static_cast<int>(sh.size()), static_cast<bool>(m.trainable[i]),
                   frozen_dtype, sh.size() == 2 ? std::min(sh[0], sh[1]) : 0});
  }
  return out;
}

std::vector<ParamSpec> Specs(const Config& c, const Model& m) {
  std::vector<ParamSpec> out;
  for (size_t i = 0; i < m.names.size(); ++i) {
    ParamSpec ps;
    ps.name = m.names[i];
    ps.shape = m.shapes[i];
    ps.dtype = m.trainable[i] ? c.dtype : DType::kF32;
    ps.trainable = m.trainable[i];
    out.push_back(ps);
  }
  return out;
}

enum Offload { kNone = 0, kCpu = 1, kNvme = 2, kNvmeParam = 3, kParamCpu = 4, kCpuDelayed = 5 };

std::string CaseName(const ::testing::TestParamInfo<std::tuple<int, int, int, int>>& i) {
  const char* off[] = {"none", "cpu", "nvme", "nvmeparam", "paramcpu", "cpudelayed"};
  return absl::StrFormat("stage%d_%s_%s_world%d", std::get<0>(i.param),
                         DTypeName(static_cast<DType>(std::get<1>(i.param))),
                         off[std::get<2>(i.param)], std::get<3>(i.param));
}

class EstimateTest : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(EstimateTest, MatchesMeasuredBytes) {
  const int stage = std::get<0>(GetParam());
  const DType dtype = static_cast<DType>(std::get<1>(GetParam()));
  const int offload = std::get<2>(GetParam());
  const int world = std::get<3>(GetParam());
  Config c;
  c.stage = stage;
  c.dtype = dtype;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 30;
  c.initial_scale_power = 4;
  // Sizes from the model, as a ds_config that leaves them out gets them.
  c.reduce_bucket_size_auto = c.stage3_prefetch_bucket_size_auto =
      c.stage3_param_persistence_threshold_auto = true;
  c.sub_group_size = 20000;        // several groups
  c.allgather_bucket_size = 5000;  // stages 1-2 publish through the staging buffer
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  if (offload == kCpu || offload == kCpuDelayed) c.offload_optimizer.device = OffloadDevice::kCpu;
  c.offload_optimizer.delayed_update = offload == kCpuDelayed;
  if (offload == kNvme) {
    c.offload_optimizer.device = OffloadDevice::kNvme;
    c.offload_optimizer.nvme_path = dir;
    c.offload_optimizer.buffer_count = 3;
  }
  if (offload == kNvmeParam) {
    c.offload_param.device = OffloadDevice::kNvme;
    c.offload_param.nvme_path = dir;
  }
  if (offload == kParamCpu) c.offload_param.device = OffloadDevice::kCpu;
  // ZeRO-Offload and, at world 3, no offload and NVMe optimizer state run on
  // an off-host device (a GPU stand-in): the estimate's device bytes are
  // checked against what the device holds.
  // NVMe optimizer state at world 3 too (its pieces go up to the device).
  const bool off_host = offload == kCpu || offload == kParamCpu ||
                        ((offload == kNone || offload == kNvme || offload == kCpuDelayed) &&
                         world == 3);
  const Model m = SmallGpt();
  auto est = EstimateMemory(EstimateInput(m, DType::kF32), c, {world, 1, off_host});
  ASSERT_TRUE(est.ok()) << est.status();
  const MemoryEstimate& e = *est;
  const std::vector<RankRun> got = MeasureOnThreadRanks(c, world, off_host, Specs(c, m), 1);
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(got[r].after.size(), 1u) << "rank " << r;
    const EngineStats& s = got[r].after[0];
    EXPECT_EQ(e.trainable_numel, s.trainable_numel);
    EXPECT_EQ(e.padded_numel, s.padded_numel);
    // DeepSpeed's default reduction dtype (the key unset): the model's,
    // whose 2-byte send/receive buffers the estimate counts.
    EXPECT_EQ(e.comm_dtype, dtype);
    EXPECT_EQ(s.comm_dtype, dtype);
    ExpectNearStats({e.param_bytes, e.grad_bytes, e.master_bytes, e.optimizer_bytes,
                     e.frozen_bytes, e.buffer_bytes},
                    s, r);
    ExpectNear2("nvme_bytes", e.nvme_bytes, s.nvme_bytes, r);
    if (stage == 3) { EXPECT_LE(s.live_gathered_high_water, e.live_peak_bytes) << "rank " << r; }
    if (off_host) {
      // What the device really holds, apart from the stats' accounting.
      ExpectNear2("device memory", e.device_bytes, got[r].device_allocated, r);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, EstimateTest,
    ::testing::Combine(::testing::Values(0, 1, 2, 3),
                       ::testing::Values(static_cast<int>(DType::kF32),
                                         static_cast<int>(DType::kF16),
                                         static_cast<int>(DType::kBF16)),
                       ::testing::Values(kNone, kCpu, kNvme), ::testing::Values(2, 3)),
    CaseName);

// Stage 3 with the working shard in files (offload_param nvme).
INSTANTIATE_TEST_SUITE_P(
    ParamFiles, EstimateTest,
    ::testing::Combine(::testing::Values(3),
                       ::testing::Values(static_cast<int>(DType::kF32),
                                         static_cast<int>(DType::kF16),
                                         static_cast<int>(DType::kBF16)),
                       ::testing::Values(kNvmeParam), ::testing::Values(2, 3)),
    CaseName);

// offload_optimizer.delayed_update: the state in host memory apart from the
// working copy, on the CPU device (world 2) and an off-host one (world 3).
INSTANTIATE_TEST_SUITE_P(
    Delayed, EstimateTest,
    ::testing::Combine(::testing::Values(1, 2, 3),
                       ::testing::Values(static_cast<int>(DType::kF32),
                                         static_cast<int>(DType::kBF16)),
                       ::testing::Values(kCpuDelayed), ::testing::Values(2, 3)),
    CaseName);

// Stage 3 with the working shard in host memory on an off-host device
// (offload_param cpu on a GPU): the device holds the shard's bytes less.
INSTANTIATE_TEST_SUITE_P(
    ParamHost, EstimateTest,
    ::testing::Combine(::testing::Values(3),
                       ::testing::Values(static_cast<int>(DType::kF32),
                                         static_cast<int>(DType::kBF16)),
                       ::testing::Values(kParamCpu), ::testing::Values(2, 3)),
    CaseName);

// A stage-3 caller that gathers every param at once reaches the estimate's
// live peak exactly (all non-persistent params), and a smaller budget caps it.
TEST(EstimateLive, Stage3PeakIsAllGatheredParams) {
  Config c;
  c.stage = 3;
  c.steps_per_print = 0;
  c.reduce_bucket_size_auto = c.stage3_prefetch_bucket_size_auto =
      c.stage3_param_persistence_threshold_auto = true;
  const Model m = SmallGpt();
  auto est = EstimateMemory(EstimateInput(m, DType::kF32), c, {2, 1, false});
  ASSERT_TRUE(est.ok());
  std::vector<int64_t> high(2);
  RunThreads(2, [&](int rank, Communicator* comm) {
    auto e = Engine::Create(c, comm);
    ASSERT_TRUE(e.ok());
    for (size_t i = 0; i < m.names.size(); ++i) {
      ParamSpec ps;
      ps.name = m.names[i];
      ps.shape = m.shapes[i];
      ps.trainable = m.trainable[i];
      ASSERT_TRUE((*e)->RegisterParam(ps).ok());
    }
    ASSERT_TRUE((*e)->Finalize().ok());
    for (int id = 0; id < (*e)->num_params(); ++id) ASSERT_TRUE((*e)->Gather(id).ok());
    high[rank] = (*e)->Stats().live_gathered_high_water;
    for (int id = 0; id < (*e)->num_params(); ++id) ASSERT_TRUE((*e)->Release(id).ok());
  });
  EXPECT_GT(est->live_peak_bytes, 0);
  EXPECT_EQ(high[0], est->live_peak_bytes);
  EXPECT_EQ(high[1], est->live_peak_bytes);
  c.stage3_max_live_parameters = 13000;
  auto capped = EstimateMemory(EstimateInput(m, DType::kF32), c, {2, 1, false});
  EXPECT_EQ(capped->live_peak_bytes, 13000 * 4);
}

// DeepSpeed's formulas against the table DeepSpeed's docs print for t5-small
// (60,506,624 params, largest layer 16,449,536, 1 node x 1 GPU), in GiB to
// two decimals as DeepSpeed prints them.
TEST(DeepSpeedFormulas, ReproduceDeepSpeedsPrintedTable) {
  const auto rows = DeepSpeedEstimates(60506624, 16449536, 1, 1);
  auto gib = [](double b) { return std::round(b / (1 << 30) * 100) / 100; };
  // stage 3, zero_init=1, in DeepSpeed's order.
  const double want[3][2] = {{1.52, 0.06}, {1.35, 0.17}, {0.09, 1.08}};
  const double want0[3][2] = {{1.52, 0.06}, {1.35, 0.17}, {0.34, 1.08}};
  int k = 0;
  for (const DeepSpeedEstimate& r : rows) {
    if (r.stage != 3) continue;
    const bool zi = r.label.find("zero_init=1") != std::string::npos;
    const auto& w = zi ? want[k % 3] : want0[k % 3];
    EXPECT_DOUBLE_EQ(gib(r.cpu_bytes), w[0]) << r.label;
    EXPECT_DOUBLE_EQ(gib(r.gpu_bytes), w[1]) << r.label;
    ++k;
  }
  EXPECT_EQ(k, 6);
  // Stage 2 at 8 GPUs (t5-3b, 2,851,598,336 params; DeepSpeed's docs:
  // 127.48GB | 5.31GB offload, 127.48GB | 15.93GB none).
  const auto z2 = DeepSpeedEstimates(2851598336LL, 32899072, 8, 1);
  EXPECT_DOUBLE_EQ(gib(z2[0].cpu_bytes), 127.48);
  EXPECT_DOUBLE_EQ(gib(z2[0].gpu_bytes), 5.31);
  EXPECT_DOUBLE_EQ(gib(z2[1].cpu_bytes), 127.48);
  EXPECT_DOUBLE_EQ(gib(z2[1].gpu_bytes), 15.93);
}

TEST(EstimateErrors, NamesTheProblem) {
  Config c;
  c.stage = 2;
  c.offload_param.device = OffloadDevice::kNvme;
  auto e = EstimateMemory({{100, 2, true, DType::kF32}}, c, {2, 1, true});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("offload_param"), std::string::npos);
  c.offload_param.device = OffloadDevice::kNone;
  EXPECT_FALSE(EstimateMemory({{100, 2, true, DType::kF32}}, c, {0, 1, true}).ok());
  EXPECT_FALSE(EstimateMemory({{-1, 2, true, DType::kF32}}, c, {2, 1, true}).ok());
}

}  // namespace
}  // namespace testing
}  // namespace zero
