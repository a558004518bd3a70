// ds_config.json parsing: DeepSpeed keys and defaults, keys without effect,
// comments. The errors naming the key path are config_errors_test's.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/config/config.h"
#include "tests/testing/parse_config.h"

namespace zero {
namespace {

using testing::Error;
using testing::Parse;

TEST(ConfigTest, DefaultsAreDeepSpeeds) {
  Config c = Parse("{}");
  EXPECT_EQ(c.stage, 0);
  EXPECT_EQ(c.dtype, DType::kF32);
  EXPECT_EQ(c.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(c.stage3_param_persistence_threshold, 100000);
  // Absent sizes are sized from the model at finalize, like "auto".
  EXPECT_TRUE(c.reduce_bucket_size_auto);
  EXPECT_TRUE(c.stage3_prefetch_bucket_size_auto);
  EXPECT_TRUE(c.stage3_param_persistence_threshold_auto);
  EXPECT_EQ(c.allgather_bucket_size, 500000000);
  EXPECT_TRUE(c.reduce_scatter);
  EXPECT_FALSE(c.prescale_gradients);
  EXPECT_EQ(c.gradient_predivide_factor, 1.0);
  EXPECT_EQ(c.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(c.sub_group_size, 1000000000);
  EXPECT_EQ(c.initial_scale_power, 16);
  EXPECT_EQ(c.loss_scale_window, 1000);
  EXPECT_EQ(c.hysteresis, 2);
  EXPECT_EQ(c.min_loss_scale, 1.0);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_EQ(c.gradient_clipping, 0.0);
  EXPECT_FALSE(c.OverlapComm());
  EXPECT_TRUE(c.no_effect_keys.empty());
  EXPECT_EQ(NoEffectReport(c), "");
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
  // All of these take effect, or say what zero does anyway.
  EXPECT_TRUE(c.no_effect_keys.empty()) << NoEffectReport(c);
  EXPECT_EQ(c.reduce_bucket_size, 500000000);
  EXPECT_FALSE(c.reduce_bucket_size_auto);  // set, even to the default
  EXPECT_EQ(c.allgather_bucket_size, 500000000);
  EXPECT_TRUE(c.reduce_scatter);
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

// ignore_unused_parameters takes effect (the engine's deferral of differing
// bucket reductions, divergence_test) and is not reported; the flight
// recorder's size is zero's own key, range-checked.
TEST(ConfigTest, UnusedParamsAndFlightRecorderKeys) {
  Config d = Parse("{}");
  EXPECT_TRUE(d.ignore_unused_parameters);
  EXPECT_EQ(d.flight_recorder_size, 256);
  Config c = Parse(R"({"zero_optimization": {"ignore_unused_parameters": false},
                       "zero_flight_recorder_size": 16})");
  EXPECT_FALSE(c.ignore_unused_parameters);
  EXPECT_EQ(c.flight_recorder_size, 16);
  EXPECT_TRUE(c.no_effect_keys.empty()) << NoEffectReport(c);
  EXPECT_FALSE(ParseDsConfig(R"({"zero_flight_recorder_size": -1})").ok());
}

// offload_param cpu + pin_memory: parsed (they take effect with state on a
// GPU) and kept for the engine to report at finalize on a host device, not
// in the startup report (which cannot know the device).
TEST(ConfigTest, Stage3ParamOffloadPinnedIsParsedAndReported) {
  Config c = Parse(R"({
    "zero_optimization": {"stage": 3,
      "offload_param": {"device": "cpu", "pin_memory": true}}})");
  EXPECT_EQ(c.offload_param.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c.offload_param.pin_memory);
  EXPECT_EQ(c.device_only_keys,
            (std::vector<std::string>{"zero_optimization.offload_param.device",
                                      "zero_optimization.offload_param.pin_memory"}));
  EXPECT_TRUE(c.no_effect_keys.empty()) << NoEffectReport(c);
  Config legacy = Parse(R"({"zero_optimization": {"stage": 3, "cpu_offload_param": true}})");
  EXPECT_EQ(legacy.offload_param.device, OffloadDevice::kCpu);
  EXPECT_EQ(legacy.device_only_keys,
            std::vector<std::string>{"zero_optimization.cpu_offload_param"});
  // Untested keys refused: still parsed; the engine decides at finalize.
  Config strict = Parse(R"({"zero_allow_untested_keys": false,
    "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})");
  EXPECT_FALSE(strict.allow_untested_keys);
}

// The parser would keep the last of duplicate keys (a second
// "zero_optimization" block would win unnoticed); DeepSpeed refuses such a
// file: an error naming the key, where it sits and both lines.
TEST(ConfigTest, DuplicateKeysAreErrorsNamingTheKeyAndBothLines) {
  EXPECT_EQ(Error("{\"train_batch_size\": 8,\n"
                  "  \"zero_optimization\": {\"stage\": 1},\n"
                  "  # a comment\n"
                  "  \"zero_optimization\": {\"stage\": 3}}"),
            "config: key 'zero_optimization' appears twice in one object (lines 2 and 4); "
            "DeepSpeed refuses duplicate keys (the parser would keep the last)");
  EXPECT_EQ(Error("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 1,\n"
                  "  /* \"lr\": 9, in a comment, is no key */ \"betas\": [0.9, 0.99],\n"
                  "  \"lr\": 2}}}"),
            "optimizer.params: key 'lr' appears twice in one object (lines 1 and 3); "
            "DeepSpeed refuses duplicate keys (the parser would keep the last)");
  // Inside arrays, escapes decoded as the parser decodes them.
  EXPECT_NE(Error(R"({"x": [{"a": 1}, {"b": 1, "\u0062": 2}]})")
                .find("x[1]: key 'b' appears twice in one object (lines 1 and 1)"),
            std::string::npos);
  // The same key in different objects, or a value equal to a key, is fine.
  Config c = Parse(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"},
      "offload_param": {"device": "none"}}, "fp16": {"enabled": false}, "bf16": {"enabled": false}})");
  EXPECT_EQ(c.stage, 2);
}

// offload_optimizer "cpu" moves the master and moments off a GPU; on the
// CPU device it does nothing and is reported at finalize, as offload_param's.
TEST(ConfigTest, OptimizerOffloadCpuIsKeptForTheDeviceReport) {
  Config c = Parse(R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "pin_memory": true}}})");
  EXPECT_EQ(c.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(c.device_only_keys,
            (std::vector<std::string>{"zero_optimization.offload_optimizer.device",
                                      "zero_optimization.offload_optimizer.pin_memory"}));
  Config legacy = Parse(R"({"zero_optimization": {"stage": 2, "cpu_offload": true}})");
  EXPECT_EQ(legacy.device_only_keys, std::vector<std::string>{"zero_optimization.cpu_offload"});
  Config nvme = Parse(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}})");
  EXPECT_TRUE(nvme.device_only_keys.empty());
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
  EXPECT_TRUE(c.reduce_bucket_size_auto);  // absent
  // stage3_gather_16bit_weights_on_model_save takes effect in the bindings'
  // 16-bit save: not reported.
  EXPECT_EQ(c.no_effect_keys,
            (std::vector<std::string>{
                "zero_optimization.stage3_max_reuse_distance"}));
  EXPECT_NE(Error(R"({"zero_optimization": {
      "stage3_gather_16bit_weights_on_model_save": 1}})").find(
                "stage3_gather_16bit_weights_on_model_save"),
            std::string::npos);
}

// Gradient reduction keys that take effect (docs/DEEPSPEED_COMPAT.md).
TEST(ConfigTest, ReductionKeysTakeEffect) {
  Config c = Parse(R"({"prescale_gradients": true,
    "zero_optimization": {"stage": 2, "reduce_scatter": false,
      "allgather_bucket_size": 2e8}})");
  EXPECT_TRUE(c.prescale_gradients);
  EXPECT_FALSE(c.reduce_scatter);
  EXPECT_EQ(c.allgather_bucket_size, 200000000);
  EXPECT_TRUE(c.no_effect_keys.empty()) << NoEffectReport(c);
  c = Parse(R"({"gradient_predivide_factor": 4,
    "zero_optimization": {"stage": 1, "allgather_bucket_size": 1000}})");
  EXPECT_FALSE(c.prescale_gradients);
  EXPECT_EQ(c.gradient_predivide_factor, 4.0);
  EXPECT_EQ(c.allgather_bucket_size, 1000);
  EXPECT_TRUE(c.no_effect_keys.empty()) << NoEffectReport(c);
  // reduce_scatter false at stage 0 (which all-reduces) and stage 3 (which
  // all-reduces then too) is not reported.
  EXPECT_TRUE(Parse(R"({"zero_optimization": {"reduce_scatter": false}})")
                  .no_effect_keys.empty());
  EXPECT_TRUE(Parse(R"({"zero_optimization": {"stage": 3, "reduce_scatter": false}})")
                  .no_effect_keys.empty());
  EXPECT_EQ(Error(R"({"zero_optimization": {"reduce_scatter": "yes"}})"),
            "zero_optimization.reduce_scatter: expected true or false, got \"yes\"");
  EXPECT_EQ(Error(R"({"zero_optimization": {"allgather_bucket_size": 0}})"),
            "zero_optimization.allgather_bucket_size: expected an integer >= 1, got 0");
  EXPECT_EQ(Error(R"({"prescale_gradients": 1})"),
            "prescale_gradients: expected true or false, got 1");
  EXPECT_EQ(Error(R"({"gradient_predivide_factor": 0})")
                .rfind("gradient_predivide_factor: expected a number in [", 0),
            0u);
  // Configs built in code are checked at Resolve.
  Config k;
  k.allgather_bucket_size = 0;
  EXPECT_EQ(k.Resolve(2).message(),
            "zero_optimization.allgather_bucket_size: expected an integer >= 1, got 0");
  k = Config();
  k.gradient_predivide_factor = 0;
  EXPECT_FALSE(k.Resolve(2).ok());
}

// communication_data_type: the gradient reductions' dtype.
// DeepSpeed's rule (engine.communication_data_type; a null value parses to
// None, as absent): the value where given, else fp16 with fp16 enabled, else
// bf16 with bf16, else fp32. Explicit "fp32" forces fp32 reductions under
// fp16/bf16. Anything else is an error naming the key.
TEST(ConfigTest, CommunicationDataType) {
  struct Case {
    const char* precision;  // the fp16/bf16 part of the ds_config
    const char* comm;       // communication_data_type's value, or nullptr: absent
    DType want;
  };
  const char* kF16On = R"("fp16": {"enabled": true}, )";
  const char* kBF16On = R"("bf16": {"enabled": true}, )";
  const Case cases[] = {
      {"", nullptr, DType::kF32},       {"", "null", DType::kF32},
      {kF16On, nullptr, DType::kF16},   {kF16On, "null", DType::kF16},
      {kF16On, "\"fp32\"", DType::kF32}, {kF16On, "\"bf16\"", DType::kBF16},
      {kBF16On, nullptr, DType::kBF16}, {kBF16On, "null", DType::kBF16},
      {kBF16On, "\"FP32\"", DType::kF32}, {kBF16On, "\"fp16\"", DType::kF16},
      {"", "\"fp16\"", DType::kF16},     {"", "\"BF16\"", DType::kBF16},
  };
  for (const Case& k : cases) {
    const std::string text =
        absl::StrCat("{", k.precision,
                     k.comm ? absl::StrCat("\"communication_data_type\": ", k.comm, ", ") : "",
                     "\"steps_per_print\": 0}");
    auto c = ParseDsConfig(text);
    ASSERT_TRUE(c.ok()) << text << ": " << c.status();
    // Whether a value was given is kept until Resolve (the engine's).
    const bool given = k.comm != nullptr && std::string(k.comm) != "null";
    EXPECT_EQ(c->communication_data_type.has_value(), given) << text;
    EXPECT_EQ(c->CommDType(), k.want) << text;
    ASSERT_TRUE(c->Resolve(2).ok()) << text;
    EXPECT_EQ(c->communication_data_type, k.want) << text;
  }
  // Configs built in code follow the same rule.
  Config code;
  code.dtype = DType::kBF16;
  EXPECT_EQ(code.CommDType(), DType::kBF16);
  ASSERT_TRUE(code.Resolve(1).ok());
  EXPECT_EQ(code.communication_data_type, DType::kBF16);
  code.dtype = DType::kF16;  // resolved already: kept
  EXPECT_EQ(code.CommDType(), DType::kBF16);

  auto c = ParseDsConfig(R"({"zero_allow_untested_keys": false, "communication_data_type": "bf16"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->no_effect_keys.empty());
  auto bad = ParseDsConfig(R"({"communication_data_type": "fp8"})");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("communication_data_type"), std::string::npos)
      << bad.status();
}

// A size the file names keeps its value, even DeepSpeed's default; absent
// or "auto" is sized from the model at finalize.
TEST(ConfigTest, AbsentSizesAreSizedFromTheModel) {
  Config c = Parse(R"({"zero_optimization": {"stage": 3,
    "reduce_bucket_size": 5e8, "stage3_prefetch_bucket_size": "auto"}})");
  EXPECT_FALSE(c.reduce_bucket_size_auto);
  EXPECT_TRUE(c.stage3_prefetch_bucket_size_auto);
  EXPECT_TRUE(c.stage3_param_persistence_threshold_auto);
  c = Parse(R"({"zero_optimization": {"stage3_param_persistence_threshold": 1e5,
    "stage3_prefetch_bucket_size": null}})");
  EXPECT_FALSE(c.stage3_param_persistence_threshold_auto);
  EXPECT_TRUE(c.stage3_prefetch_bucket_size_auto);  // null counts as absent
  EXPECT_TRUE(Parse(R"({"zero_optimization": true})").reduce_bucket_size_auto);
  // Built in code: the values it holds.
  EXPECT_FALSE(Config().reduce_bucket_size_auto);
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

TEST(ConfigTest, AcceptsDeepSpeedBlocksWithoutEffect) {
  Config c = Parse(R"({"wall_clock_breakdown": false, "tensorboard": {"enabled": false},
    "activation_checkpointing": {"partition_activations": true},
    "aio": {"block_size": 1048576, "queue_depth": 8, "single_submit": false,
            "overlap_events": true}})");
  EXPECT_EQ(c.aio.queue_depth, 8);
  // Disabled blocks and values that say what zero does are not reported.
  EXPECT_EQ(c.no_effect_keys, std::vector<std::string>{"activation_checkpointing"});
  EXPECT_EQ(NoEffectReport(c),
            "[zero] accepted without effect: activation_checkpointing (set "
            "\"zero_allow_untested_keys\": false to make these errors)");
}

// Every key accepted without effect, with a value that asks for something
// zero does not do: reported under its full path (docs/DEEPSPEED_COMPAT.md).
struct NoEffectCase {
  const char* json;
  const char* key;
};

const NoEffectCase kNoEffect[] = {
    // DeepSpeed reads the factor only when not prescaling.
    {R"({"prescale_gradients": true, "gradient_predivide_factor": 2.0})",
     "gradient_predivide_factor"},
    {R"({"seq_parallel_communication_data_type": "fp32"})",
     "seq_parallel_communication_data_type"},
    {R"({"memory_breakdown": true})", "memory_breakdown"},
    {R"({"dump_state": true})", "dump_state"},
    {R"({"sparse_gradients": true})", "sparse_gradients"},
    {R"({"zero_allow_untested_optimizer": true})", "zero_allow_untested_optimizer"},
    {R"({"zero_force_ds_cpu_optimizer": false})", "zero_force_ds_cpu_optimizer"},
    {R"({"disable_allgather": true})", "disable_allgather"},
    {R"({"dataloader_drop_last": true})", "dataloader_drop_last"},
    {R"({"graph_harvesting": true})", "graph_harvesting"},
    {R"({"use_data_before_expert_parallelism": true})",
     "use_data_before_expert_parallelism"},
    {R"({"tensorboard": {"enabled": true, "output_path": "tb"}})", "tensorboard"},
    {R"({"wandb": {"enabled": true}})", "wandb"},
    {R"({"csv_monitor": {"enabled": true}})", "csv_monitor"},
    {R"({"comet": {"enabled": true}})", "comet"},
    {R"({"flops_profiler": {"enabled": true, "profile_step": 1}})", "flops_profiler"},
    {R"({"activation_checkpointing": {"partition_activations": true}})",
     "activation_checkpointing"},
    {R"({"comms_logger": {"enabled": true, "debug": true}})", "comms_logger.debug"},
    {R"({"elasticity": {"enabled": true}})", "elasticity"},
    {R"({"autotuning": {"enabled": true}})", "autotuning"},
    {R"({"data_efficiency": {"enabled": true}})", "data_efficiency"},
    {R"({"compression_training": {"weight_quantization": {}}})", "compression_training"},
    {R"({"sparse_attention": {"mode": "fixed"}})", "sparse_attention"},
    {R"({"pipeline": {"stages": "auto"}})", "pipeline"},
    {R"({"data_types": {"grad_accum_dtype": "fp32"}})", "data_types"},
    {R"({"timers": {"throughput": {"enabled": true}}})", "timers"},
    {R"({"nebula": {"enabled": true}})", "nebula"},
    {R"({"eigenvalue": {"enabled": true}})", "eigenvalue"},
    {R"({"progressive_layer_drop": {"enabled": true}})", "progressive_layer_drop"},
    {R"({"curriculum_learning": {"enabled": true}})", "curriculum_learning"},
    {R"({"quantize_training": {"enabled": true}})", "quantize_training"},
    {R"({"compile": {"deepcompile": true}})", "compile"},
    {R"({"hybrid_engine": {"enabled": true}})", "hybrid_engine"},
    {R"({"torch_autocast": {"enabled": true}})", "torch_autocast"},
    {R"({"weight_quantization": {"post_init_quant": {}}})", "weight_quantization"},
    {R"({"fp16": {"auto_cast": true}})", "fp16.auto_cast"},
    {R"({"fp16": {"fp16_master_weights_and_grads": true}})",
     "fp16.fp16_master_weights_and_grads"},
    {R"({"bf16": {"immediate_grad_update": false}})", "bf16.immediate_grad_update"},
    {R"({"bf16": {"check_grad_overflow": false}})", "bf16.check_grad_overflow"},
    {R"({"bfloat16": {"immediate_grad_update": true}})",
     "bfloat16.immediate_grad_update"},
    {R"({"optimizer": {"type": "Adam", "params": {"torch_adam": true}}})",
     "optimizer.params.torch_adam"},
    {R"({"optimizer": {"type": "AdamW", "params": {"fused": true}}})",
     "optimizer.params.fused"},
    {R"({"optimizer": {"type": "AdamW", "params": {"foreach": false}}})",
     "optimizer.params.foreach"},
    {R"({"optimizer": {"type": "AdamW", "params": {"capturable": false}}})",
     "optimizer.params.capturable"},
    {R"({"optimizer": {"type": "AdamW", "params": {"maximize": true}}})",
     "optimizer.params.maximize"},
    {R"({"scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 5}}})",
     "scheduler.params.last_batch_iteration"},
    {R"({"checkpoint": {"tag_validation": "Fail"}})", "checkpoint.tag_validation"},
    {R"({"checkpoint": {"tag_validation": "Warn"}})", "checkpoint.tag_validation"},
    {R"({"checkpoint": {"load_universal": true}})", "checkpoint.load_universal"},
    {R"({"checkpoint": {"use_node_local_storage": true}})",
     "checkpoint.use_node_local_storage"},
    {R"({"checkpoint": {"parallel_write": {"pipeline_stage": true}}})",
     "checkpoint.parallel_write"},
    {R"({"aio": {"intra_op_parallelism": 4}})", "aio.intra_op_parallelism"},
    {R"({"aio": {"thread_count": 2}})", "aio.thread_count"},
    {R"({"aio": {"single_submit": true}})", "aio.single_submit"},
    {R"({"aio": {"overlap_events": false}})", "aio.overlap_events"},
    {R"({"aio": {"use_gds": true}})", "aio.use_gds"},
    {R"({"zero_optimization": {"contiguous_gradients": false}})",
     "zero_optimization.contiguous_gradients"},
    {R"({"zero_optimization": {"allgather_partitions": false}})",
     "zero_optimization.allgather_partitions"},
    // No all-gather to bucket at stage 0; stage 3 gathers param by param.
    {R"({"zero_optimization": {"allgather_bucket_size": 5e8}})",
     "zero_optimization.allgather_bucket_size"},
    {R"({"zero_optimization": {"stage": 3, "allgather_bucket_size": 5e8}})",
     "zero_optimization.allgather_bucket_size"},
    {R"({"zero_optimization": {"load_from_fp32_weights": false}})",
     "zero_optimization.load_from_fp32_weights"},
    {R"({"zero_optimization": {"round_robin_gradients": true}})",
     "zero_optimization.round_robin_gradients"},
    {R"({"zero_optimization": {"stage3_max_reuse_distance": 0}})",
     "zero_optimization.stage3_max_reuse_distance"},
    {R"({"zero_optimization": {"elastic_checkpoint": true}})",
     "zero_optimization.elastic_checkpoint"},
    {R"({"zero_optimization": {"memory_efficient_linear": true}})",
     "zero_optimization.memory_efficient_linear"},
    {R"({"zero_optimization": {"override_module_apply": true}})",
     "zero_optimization.override_module_apply"},
    {R"({"zero_optimization": {"zero_quantized_nontrainable_weights": true}})",
     "zero_optimization.zero_quantized_nontrainable_weights"},
    {R"({"zero_optimization": {"mics_hierarchical_params_gather": true}})",
     "zero_optimization.mics_hierarchical_params_gather"},
    {R"({"zero_optimization": {"pipeline_loading_checkpoint": true}})",
     "zero_optimization.pipeline_loading_checkpoint"},
    {R"({"zero_optimization": {"use_all_reduce_for_fetch_params": true}})",
     "zero_optimization.use_all_reduce_for_fetch_params"},
    {R"({"zero_optimization": {"legacy_stage1": true}})",
     "zero_optimization.legacy_stage1"},
    {R"({"zero_optimization": {"log_trace_cache_warnings": true}})",
     "zero_optimization.log_trace_cache_warnings"},
    {R"({"zero_optimization": {"offload_param": {"buffer_count": 5}}})",
     "zero_optimization.offload_param.buffer_count"},
    {R"({"zero_optimization": {"offload_param": {"buffer_size": 1e8}}})",
     "zero_optimization.offload_param.buffer_size"},
    {R"({"zero_optimization": {"offload_param": {"max_in_cpu": 1e9}}})",
     "zero_optimization.offload_param.max_in_cpu"},
    {R"({"zero_optimization": {"offload_optimizer": {"pipeline_read": false}}})",
     "zero_optimization.offload_optimizer.pipeline_read"},
    {R"({"zero_optimization": {"offload_optimizer": {"pipeline_write": false}}})",
     "zero_optimization.offload_optimizer.pipeline_write"},
    {R"({"zero_optimization": {"offload_optimizer": {"pipeline": false}}})",
     "zero_optimization.offload_optimizer.pipeline"},
    {R"({"zero_optimization": {"offload_optimizer": {"fast_init": true}}})",
     "zero_optimization.offload_optimizer.fast_init"},
    {R"({"zero_optimization": {"offload_optimizer": {"ratio": 0.3}}})",
     "zero_optimization.offload_optimizer.ratio"},
};

TEST(ConfigNoEffect, EachKeyIsReportedByItsPath) {
  for (const NoEffectCase& t : kNoEffect) {
    SCOPED_TRACE(t.json);
    auto c = ParseDsConfig(t.json);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->no_effect_keys, std::vector<std::string>{t.key});
    EXPECT_NE(NoEffectReport(*c).find(t.key), std::string::npos);
  }
}

TEST(ConfigNoEffect, StrictModeMakesEachAnErrorNamingTheKey) {
  for (const NoEffectCase& t : kNoEffect) {
    std::string text(t.json);
    text.insert(1, R"("zero_allow_untested_keys": false, )");
    SCOPED_TRACE(text);
    std::string e = Error(text);
    EXPECT_EQ(e.rfind(std::string(t.key) + ": accepted without effect", 0), 0u) << e;
  }
}

// The values that describe what zero does anyway are not reported, so a
// typical DeepSpeed / Hugging Face config loads quietly even when strict.
TEST(ConfigNoEffect, InertValuesAreNotReported) {
  const char* text = R"({"zero_allow_untested_keys": false,
    "prescale_gradients": false, "gradient_predivide_factor": 1.0,
    "communication_data_type": "fp32", "wall_clock_breakdown": false,
    "memory_breakdown": false, "zero_allow_untested_optimizer": false,
    "zero_force_ds_cpu_optimizer": true,
    "tensorboard": {"enabled": false, "output_path": "tb"},
    "flops_profiler": {"enabled": false, "profile_step": 1},
    "activation_checkpointing": {}, "comms_logger": {"enabled": false},
    "amp": {"enabled": false},
    "fp16": {"enabled": "auto", "auto_cast": false},
    "bf16": {"enabled": false, "check_grad_overflow": true},
    "optimizer": {"type": "AdamW", "params": {"torch_adam": false,
      "maximize": false}},
    "scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": -1}},
    "checkpoint": {"tag_validation": "Ignore", "load_universal": false,
      "use_node_local_storage": false, "parallel_write": {}},
    "aio": {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1,
      "thread_count": 1, "single_submit": false, "overlap_events": true,
      "use_gds": false},
    "zero_optimization": {"stage": 3, "contiguous_gradients": true,
      "reduce_scatter": true, "allgather_partitions": true,
      "load_from_fp32_weights": true, "round_robin_gradients": false,
      "ignore_unused_parameters": true,
      "stage3_gather_16bit_weights_on_model_save": false,
      "zero_quantized_weights": false, "legacy_stage1": false,
      "cpu_offload_param": false,
      "offload_param": {"device": "none", "pin_memory": false},
      "offload_optimizer": {"device": "cpu", "pin_memory": true,
        "buffer_count": 4, "pipeline_read": true, "pipeline_write": true,
        "fast_init": false, "ratio": 1}}})";
  Config c = Parse(text);
  EXPECT_TRUE(c.no_effect_keys.empty()) << NoEffectReport(c);
  EXPECT_EQ(NoEffectReport(c), "");
}

// wall_clock_breakdown, comms_logger and zero_trace take effect.
TEST(ConfigObserve, BreakdownCommsLoggerTrace) {
  Config c = Parse(R"({"wall_clock_breakdown": true,
    "comms_logger": {"enabled": true, "verbose": false, "prof_all": false,
                     "prof_ops": ["all_reduce", "all_gather_into_tensor"]},
    "zero_trace": {"path": "/tmp/t.json", "start_step": 2, "end_step": 4}})");
  EXPECT_TRUE(c.no_effect_keys.empty()) << NoEffectReport(c);
  EXPECT_TRUE(c.observe.wall_clock_breakdown);
  EXPECT_TRUE(c.observe.comms_logger);
  EXPECT_FALSE(c.observe.comms_prof_all);
  EXPECT_EQ(c.observe.comms_prof_ops, (std::vector<std::string>{"all_reduce", "all_gather"}));
  EXPECT_EQ(c.observe.trace_path, "/tmp/t.json");
  EXPECT_EQ(c.observe.trace_start_step, 2);
  EXPECT_EQ(c.observe.trace_end_step, 4);
  EXPECT_FALSE(Parse("{}").observe.wall_clock_breakdown);
  EXPECT_EQ(Error(R"({"zero_trace": {"path": "t.json", "start_step": 3, "end_step": 3}})"),
            "zero_trace.end_step: expected more than start_step (3), got 3");
  EXPECT_NE(Error(R"({"zero_trace": {"start_step": 1}})").find("zero_trace.path"),
            std::string::npos);
  EXPECT_NE(Error(R"({"zero_trace": {"path": "t", "every": 1}})").find("zero_trace"),
            std::string::npos);
  EXPECT_NE(Error(R"({"comms_logger": {"prof_ops": ["all_to_all"]}})").find("prof_ops"),
            std::string::npos);
  EXPECT_NE(Error(R"({"comms_logger": {"enabled": 1}})").find("comms_logger.enabled"),
            std::string::npos);
}

TEST(ConfigNoEffect, ReportListsAllInParseOrder) {
  Config c = Parse(R"({"memory_breakdown": true,
    "zero_optimization": {"stage": 3, "allgather_bucket_size": 2e8,
      "contiguous_gradients": false}, "tensorboard": {"enabled": true}})");
  EXPECT_EQ(c.no_effect_keys,
            (std::vector<std::string>{"zero_optimization.contiguous_gradients",
                                      "zero_optimization.allgather_bucket_size",
                                      "memory_breakdown", "tensorboard"}));
  EXPECT_EQ(NoEffectReport(c),
            "[zero] accepted without effect: zero_optimization.contiguous_gradients, "
            "zero_optimization.allgather_bucket_size, memory_breakdown, "
            "tensorboard (set \"zero_allow_untested_keys\": false to make these "
            "errors)");
  std::string e = Error(R"({"zero_allow_untested_keys": false,
    "memory_breakdown": true, "tensorboard": {"enabled": true}})");
  EXPECT_EQ(e.rfind("memory_breakdown: accepted without effect", 0), 0u) << e;
  EXPECT_NE(e.find("also: tensorboard"), std::string::npos) << e;
  // Explicitly allowed (the default): the same config loads.
  EXPECT_EQ(Parse(R"({"zero_allow_untested_keys": true, "dump_state": true})")
                .no_effect_keys,
            std::vector<std::string>{"dump_state"});
  EXPECT_EQ(Error(R"({"zero_allow_untested_keys": 0})"),
            "zero_allow_untested_keys: expected true or false, got 0");
}

TEST(ConfigNoEffect, NoEffectKeysKeepTheirTypeChecks) {
  EXPECT_EQ(Error(R"({"zero_optimization": {"contiguous_gradients": "yes"}})"),
            "zero_optimization.contiguous_gradients: expected true or false, got \"yes\"");
  EXPECT_EQ(Error(R"({"zero_optimization": {"offload_optimizer": {"ratio": 2}}})"),
            "zero_optimization.offload_optimizer.ratio: expected a number in [0, 1], got 2");
  EXPECT_EQ(Error(R"({"aio": {"intra_op_parallelism": 0}})"),
            "aio.intra_op_parallelism: expected 1..1024, got 0");
}

// Beyond one node (docs/ARCHITECTURE.md, "Nodes, hybrid sharding and
// ZeRO++"): the keys take effect; bad values name the key.
TEST(ConfigMultiNode, KeysTakeEffect) {
  Config c = Parse(R"({"zero_ranks_per_node": 4, "zero_optimization": {"stage": 3,
    "zero_hpz_partition_size": 8, "zero_quantized_weights": true,
    "zero_quantized_gradients": true, "zero_quantized_gradients_bits": 4,
    "zero_quantized_gradients_error_feedback": false, "zero_quantization_block_size": 64}})");
  EXPECT_EQ(c.ranks_per_node, 4);
  EXPECT_EQ(c.hpz_partition_size, 8);
  EXPECT_TRUE(c.quantized_weights && c.quantized_gradients);
  EXPECT_EQ(c.quantized_gradients_bits, 4);
  EXPECT_FALSE(c.quantized_gradients_error_feedback);
  EXPECT_EQ(c.quantization_block_size, 64);
  EXPECT_TRUE(c.no_effect_keys.empty());
  Config h = Parse(R"({"zero_optimization": {"stage": 2, "mics_shard_size": 8}})");
  EXPECT_EQ(h.mics_shard_size, 8);
  Config f = Parse(R"({"zero_optimization": {"stage": 3, "sharding_strategy": "HYBRID_SHARD"}})");
  EXPECT_TRUE(f.hybrid_shard_per_node);
  EXPECT_EQ(Error(R"({"zero_optimization": {"zero_hpz_partition_size": 0}})"),
            "zero_optimization.zero_hpz_partition_size: expected 1..1048576, got 0");
  EXPECT_NE(Error(R"({"zero_optimization": {"mics_shard_size": 0}})").find("mics_shard_size"),
            std::string::npos);
  EXPECT_NE(Error(R"({"zero_optimization": {"zero_quantized_gradients_bits": 6}})")
                .find("expected 4 or 8, got 6"),
            std::string::npos);
  EXPECT_NE(Error(R"({"zero_optimization": {"sharding_strategy": "NO_SHARD"}})")
                .find("sharding_strategy"),
            std::string::npos);
  // Resolve: the stage and the world must allow them.
  Config s2 = Parse(R"({"zero_optimization": {"stage": 2, "zero_quantized_weights": true}})");
  EXPECT_NE(s2.Resolve(4).message().find("zero_quantized_weights: ZeRO++"), std::string::npos);
  Config m3 = Parse(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 3}})");
  EXPECT_NE(m3.Resolve(4).message().find("divisor of the world size 4"), std::string::npos);
  Config rs = Parse(R"({"zero_optimization": {"stage": 3, "zero_quantized_gradients": true,
    "reduce_scatter": false}})");
  EXPECT_NE(rs.Resolve(4).message().find("reduce_scatter is false"), std::string::npos);
}

TEST(ConfigComments, HashAndSlashCommentsOutsideStrings) {
  Config c = Parse(R"(# a DeepSpeed config, as pasted
{
  "train_batch_size": 16,  # global
  // ZeRO
  "zero_optimization": {
    "stage": 3, /* partition everything */
    "offload_optimizer": {"device": "nvme",
      "nvme_path": "/mnt/nvme#1//x/*y*/"}  # '#' and '//' inside a string stay
  },
  /* a block
     # with a hash and a "quote
  */
  "steps_per_print": 5 # last
}
# trailing)");
  EXPECT_EQ(c.train_batch_size, 16);
  EXPECT_EQ(c.stage, 3);
  EXPECT_EQ(c.steps_per_print, 5);
  EXPECT_EQ(c.offload_optimizer.nvme_path, "/mnt/nvme#1//x/*y*/");
  // Escaped quotes do not end the string early.
  EXPECT_EQ(Parse(R"({"zero_optimization": {"offload_optimizer": {"device": "nvme",
    "nvme_path": "a\"#b"}}})").offload_optimizer.nvme_path, "a\"#b");
}

TEST(ConfigComments, ErrorsKeepTheirLine) {
  std::string e = Error("# comment\n{\"stage\": # x\n  ,}");
  EXPECT_NE(e.find("config: invalid JSON"), std::string::npos) << e;
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  e = Error("{\"train_batch_size\": 1 /* never closed\n}");
  EXPECT_NE(e.find("config: invalid JSON"), std::string::npos) << e;
}

}  // namespace
}  // namespace zero
