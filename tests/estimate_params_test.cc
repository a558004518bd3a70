// zero_estimate_memory_params (C ABI 1.16) against what engines measure: a
// GPT-like model (an embedding, 2-D hidden weights, biases and norms, an LM
// head, frozen params of two dtypes, one of them a hidden matrix) described
// as zero_param_desc, under optimizer Muon and AdamW at stages 0-3 x worlds
// 1-3 x fp32/bf16 x the state in memory / ZeRO-Offload beside an off-host
// device: every zero_stats category per rank within 2 %, Muon's buffers per
// rank exactly, the device's bytes within 2 %. The 1.5 call over the same
// shapes is unchanged (all trainable, every 2-D param on Muon), and the
// refusals name the entry and its param.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/config/config.h"
#include "core/engine/param_registry.h"
#include "core/estimate/memory_estimate.h"
#include "core/estimate/registry_estimate.h"
#include "tests/testing/measure_ranks.h"
#include "zero_c.h"

namespace zero {
namespace testing {
namespace {

constexpr int64_t kHidden = 56, kVocab = 97;

// What a caller would register: name, shape, trainable, a frozen param's
// dtype. Names follow Hugging Face's: DeepSpeed's rule keeps
// "model.embed_tokens" and "lm_head" on AdamW.
struct Desc {
  std::string name;
  std::vector<int64_t> shape;
  bool trainable = true;
  zero_dtype frozen_dtype = ZERO_DTYPE_F32;
};

std::vector<Desc> GptLike() {
  const int64_t h = kHidden;
  std::vector<Desc> m = {{"model.embed_tokens.weight", {kVocab, h}},
                         {"model.embed_positions.weight", {16, h}, false}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = absl::StrFormat("model.layers.%d.", l);
    m.push_back({p + "ln1.weight", {h}, l != 0, ZERO_DTYPE_BF16});
    m.push_back({p + "ln1.bias", {h}});
    m.push_back({p + "attn.qkv.weight", {3 * h, h}});
    m.push_back({p + "attn.qkv.bias", {3 * h}});
    // A frozen hidden matrix: on Muon were it trainable.
    m.push_back({p + "attn.proj.weight", {h, h}, l != 0});
    m.push_back({p + "attn.proj.bias", {h}});
    m.push_back({p + "mlp.fc.weight", {4 * h, h}});
    m.push_back({p + "mlp.fc.bias", {4 * h}});
    m.push_back({p + "mlp.fc2.weight", {h, 4 * h}});
    m.push_back({p + "mlp.fc2.bias", {h}});
  }
  m.push_back({"model.norm.weight", {h}});
  m.push_back({"lm_head.weight", {kVocab, h}});
  return m;
}

// The C descriptions; `dtype` of trainable ones the working dtype, as a
// caller registering with an engine gives them.
std::vector<zero_param_desc> CDescs(const std::vector<Desc>& m, zero_dtype working) {
  std::vector<zero_param_desc> out;
  for (const Desc& d : m) {
    zero_param_desc c = ZERO_PARAM_DESC_INIT;
    c.name = d.name.c_str();
    c.ndim = static_cast<int32_t>(d.shape.size());
    c.shape = d.shape.data();
    c.dtype = d.trainable ? working : d.frozen_dtype;
    c.trainable = d.trainable ? 1 : 0;
    out.push_back(c);
  }
  return out;
}

std::vector<ParamSpec> Specs(const std::vector<Desc>& m, DType working) {
  std::vector<ParamSpec> out;
  for (const Desc& d : m) {
    ParamSpec ps;
    ps.name = d.name;
    ps.shape = d.shape;
    ps.trainable = d.trainable;
    ps.dtype = d.trainable ? working : static_cast<DType>(d.frozen_dtype);
    out.push_back(ps);
  }
  return out;
}

std::string Json(bool muon, int stage, bool bf16, bool offload) {
  return absl::StrFormat(
      R"({"steps_per_print": 0, "bf16": {"enabled": %s},
          "optimizer": {"type": "%s", "params": {"lr": 0.01}},
          "zero_optimization": {"stage": %d, "sub_group_size": 3000,
                                "offload_optimizer": {"device": "%s"}}})",
      bf16 ? "true" : "false", muon ? "Muon" : "AdamW", stage, offload ? "cpu" : "none");
}

class EstimateParamsTest
    : public ::testing::TestWithParam<std::tuple<bool, int, int, bool, bool>> {};

TEST_P(EstimateParamsTest, MatchesWhatTheEngineMeasures) {
  const auto [muon, stage, world, bf16, offload] = GetParam();
  const std::string json = Json(muon, stage, bf16, offload);
  auto config = ParseDsConfig(json);
  ASSERT_TRUE(config.ok()) << config.status();
  const std::vector<Desc> model = GptLike();
  const std::vector<zero_param_desc> descs =
      CDescs(model, bf16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F32);
  // ZeRO-Offload beside an off-host device (a GPU stand-in): gpu 1.
  zero_memory_estimate e = ZERO_MEMORY_ESTIMATE_INIT;
  ASSERT_EQ(zero_estimate_memory_params(json.c_str(), static_cast<int32_t>(descs.size()),
                                        descs.data(), world, 1, offload ? 1 : 0, &e),
            ZERO_OK)
      << zero_last_error();
  // Muon's buffers per rank: the core estimate of the same registry, which
  // the C call reports (its busiest rank's in buffer_bytes).
  ParamRegistry registry(config->dtype);
  for (const ParamSpec& ps : Specs(model, config->dtype)) ASSERT_TRUE(registry.Register(ps).ok());
  auto core = EstimateMemory(EstimateParamsOf(registry), *config, {world, 1, offload});
  ASSERT_TRUE(core.ok()) << core.status();
  EXPECT_EQ(core->buffer_bytes, e.buffer_bytes);
  EXPECT_EQ(core->device_bytes, e.device_bytes);

  const std::vector<RankRun> got =
      MeasureOnThreadRanks(*config, world, offload, Specs(model, config->dtype), 1);
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(got[r].after.size(), 1u) << "rank " << r;
    const EngineStats& s = got[r].after[0];
    EXPECT_EQ(e.trainable_numel, s.trainable_numel);
    EXPECT_EQ(e.padded_numel, s.padded_numel);
    EXPECT_GT(s.frozen_bytes, 0);
    // Muon's host buffers: exactly, per rank; none under AdamW.
    const int64_t muon_here = muon ? core->muon_rank_bytes.at(r) : 0;
    EXPECT_EQ(muon_here, s.muon_bytes) << "rank " << r;
    if (muon) EXPECT_GT(s.muon_bytes, 0) << "rank " << r;
    ExpectNearStats({e.param_bytes, e.grad_bytes, e.master_bytes, e.optimizer_bytes,
                     e.frozen_bytes, e.buffer_bytes - core->muon_bytes + muon_here},
                    s, r);
    if (offload) {
      ExpectNear2("device memory", e.device_bytes, got[r].device_allocated, r);
    }
  }

  // The 1.5 call over the same shapes gives what it gave: every param
  // trainable, every 2-D one on Muon -- the estimate of those params.
  std::vector<int64_t> numel;
  std::vector<int32_t> ndim;
  std::vector<EstimateParam> all_trainable;
  for (const Desc& d : model) {
    int64_t n = 1;
    for (int64_t x : d.shape) n *= x;
    numel.push_back(n);
    ndim.push_back(static_cast<int32_t>(d.shape.size()));
    EstimateParam p;
    p.numel = n;
    p.ndim = ndim.back();
    all_trainable.push_back(p);
  }
  zero_memory_estimate old = ZERO_MEMORY_ESTIMATE_INIT;
  ASSERT_EQ(zero_estimate_memory(json.c_str(), static_cast<int32_t>(numel.size()), numel.data(),
                                 ndim.data(), world, 1, offload ? 1 : 0, &old),
            ZERO_OK)
      << zero_last_error();
  auto then = EstimateMemory(all_trainable, *config, {world, 1, offload});
  ASSERT_TRUE(then.ok());
  EXPECT_EQ(old.trainable_numel, then->trainable_numel);
  EXPECT_EQ(old.optimizer_bytes, then->optimizer_bytes);
  EXPECT_EQ(old.buffer_bytes, then->buffer_bytes);
  EXPECT_EQ(old.device_bytes, then->device_bytes);
  EXPECT_EQ(old.frozen_bytes, 0);
  EXPECT_GT(old.trainable_numel, e.trainable_numel);  // the frozen ones counted as trainable
}

std::string CaseName(const ::testing::TestParamInfo<EstimateParamsTest::ParamType>& i) {
  return absl::StrFormat("%s_stage%d_world%d_%s_%s", std::get<0>(i.param) ? "muon" : "adamw",
                         std::get<1>(i.param), std::get<2>(i.param),
                         std::get<3>(i.param) ? "bf16" : "fp32",
                         std::get<4>(i.param) ? "cpuoffload" : "inmemory");
}

INSTANTIATE_TEST_SUITE_P(All, EstimateParamsTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(1, 2, 3), ::testing::Bool(),
                                            ::testing::Bool()),
                         CaseName);

// With Muon the named call and the 1.5 call differ by what DeepSpeed's rule
// moves to AdamW: the embedding and the LM head hold Adam's two moments, no
// Muon buffers; the 1.5 call orthogonalises them (and the frozen matrices).
TEST(EstimateParams, MuonKeepsEmbeddingAndHeadOnAdamW) {
  const std::string json = Json(true, 2, false, false);
  std::vector<Desc> two = {{"model.embed_tokens.weight", {kVocab, kHidden}},
                           {"lm_head.weight", {kVocab, kHidden}}};
  const std::vector<zero_param_desc> d = CDescs(two, ZERO_DTYPE_F32);
  zero_memory_estimate named = ZERO_MEMORY_ESTIMATE_INIT, counted = ZERO_MEMORY_ESTIMATE_INIT;
  ASSERT_EQ(zero_estimate_memory_params(json.c_str(), 2, d.data(), 1, 1, 0, &named), ZERO_OK);
  const int64_t numel[] = {kVocab * kHidden, kVocab * kHidden};
  const int32_t ndim[] = {2, 2};
  ASSERT_EQ(zero_estimate_memory(json.c_str(), 2, numel, ndim, 1, 1, 0, &counted), ZERO_OK);
  auto config = ParseDsConfig(json);
  ASSERT_TRUE(config.ok());
  ParamRegistry registry(config->dtype);
  for (const ParamSpec& ps : Specs(two, config->dtype)) ASSERT_TRUE(registry.Register(ps).ok());
  for (const EstimateParam& p : EstimateParamsOf(registry)) EXPECT_EQ(p.use_muon, 0);
  EXPECT_LT(named.buffer_bytes, counted.buffer_bytes);  // no Muon buffers
  EXPECT_EQ(named.optimizer_bytes, counted.optimizer_bytes);
  // ZERO_MUON_ON puts them back on Muon (the 1.5 call's buffers differ
  // still: without shapes it takes each matrix as square).
  std::vector<zero_param_desc> on = d;
  for (zero_param_desc& x : on) x.use_muon = ZERO_MUON_ON;
  zero_memory_estimate forced = ZERO_MEMORY_ESTIMATE_INIT;
  ASSERT_EQ(zero_estimate_memory_params(json.c_str(), 2, on.data(), 1, 1, 0, &forced), ZERO_OK);
  EXPECT_GT(forced.buffer_bytes, named.buffer_bytes);
}

// Refusals as registration's, naming the entry and the param.
TEST(EstimateParams, RefusalsNameTheEntryAndParam) {
  const std::string json = Json(true, 1, false, false);
  const std::vector<Desc> model = GptLike();
  auto refused = [&](std::vector<zero_param_desc> d, int32_t n, const std::string& words) {
    zero_memory_estimate e = ZERO_MEMORY_ESTIMATE_INIT;
    EXPECT_EQ(zero_estimate_memory_params(json.c_str(), n, d.empty() ? nullptr : d.data(), 1, 1,
                                          0, &e),
              ZERO_INVALID_ARGUMENT)
        << words;
    const std::string msg = zero_last_error();
    EXPECT_NE(msg.find("zero_estimate_memory_params"), std::string::npos) << msg;
    EXPECT_NE(msg.find(words), std::string::npos) << msg;
  };
  const std::vector<zero_param_desc> good = CDescs(model, ZERO_DTYPE_F32);
  const int32_t n = static_cast<int32_t>(good.size());
  refused({}, 2, "params is NULL");
  refused(good, -1, "num_params is negative");
  std::vector<zero_param_desc> d = good;
  d[3].struct_size = 8;
  refused(d, n, "param 3");
  d = good;
  d[4].ndim = ZERO_MAX_DIMS + 1;
  refused(d, n, "param 4 'model.layers.0.attn.qkv.weight': ndim 9");
  d = good;
  d[4].shape = nullptr;
  refused(d, n, "'model.layers.0.attn.qkv.weight'");
  const int64_t zero_dim[] = {0, kHidden};
  d = good;
  d[4].shape = zero_dim;
  refused(d, n, "model.layers.0.attn.qkv.weight");
  d = good;
  d[5].name = d[4].name;
  refused(d, n, "param 5: register_param 'model.layers.0.attn.qkv.weight': name already");
  d = good;
  d[2].use_muon = ZERO_MUON_ON;  // ln1.weight, 1-D
  refused(d, n, "'model.layers.0.ln1.weight': use_muon on a 1-D param");
  d = good;
  d[0].name = nullptr;
  refused(d, n, "param 0");
  d = good;
  d[0].name = "";
  refused(d, n, "empty name");
  zero_memory_estimate e = ZERO_MEMORY_ESTIMATE_INIT;
  EXPECT_EQ(zero_estimate_memory_params(json.c_str(), 0, nullptr, 1, 1, 0, &e), ZERO_OK);
  EXPECT_EQ(e.trainable_numel, 0);
}

}  // namespace
}  // namespace testing
}  // namespace zero
