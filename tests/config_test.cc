// ds_config.json parsing: DeepSpeed keys and defaults; every error names the
// key path and what was expected.
#include <gtest/gtest.h>

#include "core/config/config.h"

namespace zero {
namespace {

Config Parse(const std::string& text) {
  auto c = ParseDsConfig(text);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Config{};
}

std::string Error(const std::string& text) {
  auto c = ParseDsConfig(text);
  EXPECT_FALSE(c.ok()) << text;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ConfigTest, DefaultsAreDeepSpeeds) {
  Config c = Parse("{}");
  EXPECT_EQ(c.stage, 0);
  EXPECT_EQ(c.dtype, DType::kF32);
  EXPECT_EQ(c.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.allgather_bucket_size, 500000000);
  EXPECT_EQ(c.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(c.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(c.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(c.sub_group_size, 1000000000);
  EXPECT_EQ(c.initial_scale_power, 16);
  EXPECT_EQ(c.loss_scale_window, 1000);
  EXPECT_EQ(c.hysteresis, 2);
  EXPECT_EQ(c.min_loss_scale, 1.0);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_EQ(c.gradient_clipping, 0.0);
  EXPECT_FALSE(c.OverlapComm());
  c.stage = 3;
  EXPECT_TRUE(c.OverlapComm());  // overlap_comm: None -> true for stage 3
}

// The article's example configs, each as DeepSpeed users write them.
TEST(ConfigTest, Stage1WithAllgatherPartitionsAndReduceScatter) {
  Config c = Parse(R"({
    "train_batch_size": 32,
    "zero_optimization": {"stage": 1, "allgather_partitions": true,
      "reduce_scatter": true, "allgather_bucket_size": 5e8,
      "reduce_bucket_size": 5e8, "overlap_comm": false,
      "contiguous_gradients": true}})");
  EXPECT_EQ(c.stage, 1);
  EXPECT_TRUE(c.allgather_partitions);
  EXPECT_TRUE(c.reduce_scatter);
  EXPECT_EQ(c.reduce_bucket_size, 500000000);
  EXPECT_FALSE(c.OverlapComm());
  ASSERT_TRUE(c.Resolve(4).ok());
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
}

TEST(ConfigTest, Stage3WithCpuOptimizerOffloadPinned) {
  Config c = Parse(R"({
    "zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true}}})");
  EXPECT_EQ(c.stage, 3);
  EXPECT_EQ(c.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c.offload_optimizer.pin_memory);
  EXPECT_TRUE(c.Resolve(1).ok());
}

TEST(ConfigTest, Stage3LiveParametersAndAutoPrefetch) {
  Config c = Parse(R"({
    "zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e9,
      "stage3_max_reuse_distance": 1e9, "stage3_prefetch_bucket_size": "auto",
      "stage3_param_persistence_threshold": "auto",
      "stage3_gather_16bit_weights_on_model_save": true}})");
  EXPECT_EQ(c.stage3_max_live_parameters, 1000000000);
  EXPECT_TRUE(c.stage3_prefetch_bucket_size_auto);
  EXPECT_TRUE(c.stage3_param_persistence_threshold_auto);
  EXPECT_TRUE(c.stage3_gather_16bit_weights_on_model_save);
}

TEST(ConfigTest, Fp16DynamicLossScaling) {
  Config c = Parse(R"({"fp16": {"enabled": true, "loss_scale": 0,
    "loss_scale_window": 100, "hysteresis": 2, "initial_scale_power": 16,
    "min_loss_scale": 1}})");
  EXPECT_EQ(c.dtype, DType::kF16);
  EXPECT_EQ(c.loss_scale, 0.0);
  EXPECT_EQ(c.loss_scale_window, 100);
  EXPECT_EQ(c.hysteresis, 2);
  EXPECT_EQ(c.initial_scale_power, 16);
  EXPECT_EQ(c.min_loss_scale, 1.0);
}

TEST(ConfigTest, Bf16AndItsAlias) {
  EXPECT_EQ(Parse(R"({"bf16": {"enabled": true}})").dtype, DType::kBF16);
  EXPECT_EQ(Parse(R"({"bfloat16": {"enabled": true}})").dtype, DType::kBF16);
}

TEST(ConfigTest, ClippingPrintAndAdamW) {
  Config c = Parse(R"({"gradient_clipping": 1.0, "steps_per_print": 100,
    "optimizer": {"type": "AdamW", "params": {"lr": 6e-5,
      "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.01}}})");
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.steps_per_print, 100);
  EXPECT_EQ(c.optimizer, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(c.lr, 6e-5);
  EXPECT_DOUBLE_EQ(c.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.weight_decay, 0.01);
}

TEST(ConfigTest, AutoMicroBatchAndAccumulation) {
  Config c = Parse(R"({"train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto",
      "warmup_max_lr": "auto", "warmup_num_steps": 100}}})");
  ASSERT_TRUE(c.Resolve(4).ok());
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 1);
  EXPECT_EQ(c.train_batch_size, 4);
  EXPECT_DOUBLE_EQ(c.warmup_max_lr, 3e-4);  // "auto": the optimizer lr
}

TEST(ConfigTest, BatchArithmetic) {
  Config c = Parse(R"({"train_batch_size": 64, "gradient_accumulation_steps": 2})");
  ASSERT_TRUE(c.Resolve(4).ok());
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  Config bad = Parse(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 2})");
  absl::Status s = bad.Resolve(4);
  EXPECT_NE(s.message().find("train_batch_size: expected"), std::string::npos) << s;
}

TEST(ConfigTest, DeprecatedAliases) {
  EXPECT_EQ(Parse(R"({"zero_optimization": true})").stage, 1);
  Config c = Parse(R"({"zero_optimization": {"stage": 2, "cpu_offload": true}})");
  EXPECT_EQ(c.offload_optimizer.device, OffloadDevice::kCpu);
}

TEST(ConfigErrors, OutOfRangeNamesKeyAndRange) {
  EXPECT_EQ(Error(R"({"zero_optimization": {"stage": 4}})"),
            "zero_optimization.stage: expected 0..3, got 4");
}

TEST(ConfigErrors, UnknownKeysAreErrorsAtEveryLevel) {
  EXPECT_EQ(Error(R"({"zero_optimisation": {}})"), "zero_optimisation: unknown key");
  EXPECT_EQ(Error(R"({"zero_optimization": {"stage3_max_live_params": 1}})"),
            "zero_optimization.stage3_max_live_params: unknown key");
  EXPECT_EQ(Error(R"({"optimizer": {"type": "Adam", "params": {"lrate": 1}}})"),
            "optimizer.params.lrate: unknown key");
  EXPECT_EQ(Error(R"({"fp16": {"enabled": true, "scale_window": 3}})"),
            "fp16.scale_window: unknown key");
}

TEST(ConfigErrors, WrongTypesNameKeyAndExpectation) {
  EXPECT_EQ(Error(R"({"zero_optimization": {"stage": "two"}})"),
            "zero_optimization.stage: expected 0..3, got \"two\"");
  EXPECT_EQ(Error(R"({"zero_optimization": {"overlap_comm": 1}})"),
            "zero_optimization.overlap_comm: expected true or false, got 1");
  EXPECT_EQ(Error(R"({"gradient_clipping": "big"})"),
            "gradient_clipping: expected a number in [0, 1e+30] or \"auto\", got \"big\"");
  EXPECT_EQ(Error(R"({"zero_optimization": {"reduce_bucket_size": 1.5}})"),
            "zero_optimization.reduce_bucket_size: expected an integer >= 1 or \"auto\", got 1.5");
  EXPECT_EQ(Error(R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9]}}})"),
            "optimizer.params.betas: expected [beta1, beta2] with each in [0, 1), got [0.9]");
  EXPECT_EQ(Error(R"({"zero_optimization": 3})"),
            "zero_optimization: expected an object, got 3");
}

TEST(ConfigErrors, BadEnumsAndCombinations) {
  EXPECT_NE(Error(R"({"optimizer": {"type": "Lion"}})").find("optimizer.type: expected one of Adam, AdamW, SGD"),
            std::string::npos);
  EXPECT_NE(Error(R"({"zero_optimization": {"offload_optimizer": {"device": "gpu"}}})")
                .find("zero_optimization.offload_optimizer.device: expected one of none, cpu, nvme"),
            std::string::npos);
  EXPECT_NE(Error(R"({"zero_optimization": {"offload_optimizer": {"device": "nvme"}}})")
                .find("zero_optimization.offload_optimizer.nvme_path: required"),
            std::string::npos);
  EXPECT_NE(Error(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})")
                .find("expected at most one enabled"),
            std::string::npos);
  EXPECT_NE(Error(R"({"scheduler": {"type": "WarmupDecayLR", "params": {}}})")
                .find("scheduler.params.total_num_steps: required"),
            std::string::npos);
  EXPECT_NE(Error("{\"stage\": ").find("config: invalid JSON"), std::string::npos);
}

TEST(ConfigErrors, OffloadParamBelowStage3) {
  Config c = Parse(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})");
  absl::Status s = c.Resolve(1);
  EXPECT_NE(s.message().find("zero_optimization.offload_param.device"), std::string::npos) << s;
}

TEST(ConfigTest, AcceptsDeepSpeedBlocksWithoutEffect) {
  Config c = Parse(R"({"wall_clock_breakdown": false, "tensorboard": {"enabled": false},
    "activation_checkpointing": {"partition_activations": true},
    "aio": {"block_size": 1048576, "queue_depth": 8, "single_submit": false,
            "overlap_events": true}})");
  EXPECT_EQ(c.aio.queue_depth, 8);
}

}  // namespace
}  // namespace zero
