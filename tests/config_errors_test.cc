// ds_config.json errors: each names the key path and what was expected
// (out of range, unknown keys, wrong types, bad enums and combinations,
// refused keys, numbers beyond a double or int64, batch products that
// overflow).
#include <gtest/gtest.h>

#include <string>

#include "core/config/config.h"
#include "tests/testing/parse_config.h"

namespace zero {
namespace {

using testing::Error;
using testing::Parse;

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
  EXPECT_NE(Error(R"({"optimizer": {"type": "Lamb"}})")
                .find("optimizer.type: expected one of Adam, AdamW, SGD, Lion, Adagrad"),
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

// Refused keys stay errors whatever zero_allow_untested_keys says.
TEST(ConfigErrors, RefusedKeys) {
  EXPECT_NE(Error(R"({"amp": {"enabled": true}})").find("amp.enabled: expected false"),
            std::string::npos);
  Config ok = Parse(R"({"zero_optimization": {"zero_hpz_partition_size": 1,
    "mics_shard_size": -1}})");
  EXPECT_TRUE(ok.no_effect_keys.empty());
}

TEST(ConfigErrors, NumbersBeyondADoubleNameTheKey) {
  EXPECT_EQ(Error(R"({"train_batch_size": 1e400})"),
            "train_batch_size: expected a number within the range of a double, got 1e400");
  EXPECT_EQ(Error(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": -1e400}})"),
            "zero_optimization.reduce_bucket_size: expected a number within the "
            "range of a double, got -1e400");
  EXPECT_EQ(Error(R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9, 1e999]}}})"),
            "optimizer.params.betas[1]: expected a number within the range of a "
            "double, got 1e999");
  EXPECT_EQ(Error(R"({"tensorboard": {"a": [1, [2, 3], {"b": 4}, 5e500]}})"),
            "tensorboard.a[3]: expected a number within the range of a double, got 5e500");
  EXPECT_EQ(Error("1e400"),
            "config: expected a number within the range of a double, got 1e400");
}

TEST(ConfigErrors, HugeIntegersAreRangeErrorsNotConversions) {
  EXPECT_EQ(Error(R"({"train_batch_size": 1e30})"),
            "train_batch_size: expected an integer >= 1, got 1e+30");
  // 2^63: the first double past int64_t (INT64_MAX rounds up to it).
  EXPECT_EQ(Error(R"({"train_batch_size": 9.223372036854775807e18})"),
            "train_batch_size: expected an integer >= 1, got 9.223372036854776e+18");
  EXPECT_EQ(Error(R"({"train_batch_size": 9223372036854775808})"),
            "train_batch_size: expected an integer >= 1, got 9223372036854775808");
  // 2^64 - 1 must not wrap to -1 (the one value mics_shard_size accepts).
  EXPECT_EQ(Error(R"({"zero_optimization": {"mics_shard_size": 18446744073709551615}})"),
            "zero_optimization.mics_shard_size: expected -1..1048576, got 18446744073709551615");
  EXPECT_EQ(Error(R"({"fp16": {"loss_scale_window": 1e10}})"),
            "fp16.loss_scale_window: expected 1..2147483647, got 10000000000.0");
  EXPECT_EQ(Error(R"({"train_batch_size": -9.3e18})"),
            "train_batch_size: expected an integer >= 1, got -9.3e+18");
  // The largest exact values still fit.
  Config c = Parse(R"({"zero_optimization": {"sub_group_size": 9223372036854775807,
    "stage3_max_live_parameters": 4.611686018427388e18}})");
  EXPECT_EQ(c.sub_group_size, INT64_MAX);
  EXPECT_EQ(c.stage3_max_live_parameters, int64_t{1} << 62);
}

// Found by //tests/fuzz:config (tools/fuzz.sh): the batch arithmetic
// multiplied micro batch, accumulation steps and world size in int64
// without checking (a product that wraps is undefined, and could "match").
TEST(ConfigErrors, BatchProductsThatOverflowAreErrors) {
  Config c = Parse(R"({"train_batch_size": 8,
    "train_micro_batch_size_per_gpu": 4611686018427387904, "gradient_accumulation_steps": 4})");
  EXPECT_EQ(c.Resolve(2).message(),
            "train_batch_size: train_micro_batch_size_per_gpu * gradient_accumulation_steps * "
            "world_size = 4611686018427387904 * 4 * 2 does not fit in 64 bits");
  c = Parse(R"({"train_micro_batch_size_per_gpu": 4611686018427387904,
    "gradient_accumulation_steps": 2})");
  EXPECT_EQ(c.Resolve(3).message(),
            "train_batch_size: train_micro_batch_size_per_gpu * gradient_accumulation_steps * "
            "world_size = 4611686018427387904 * 2 * 3 does not fit in 64 bits");
  c = Parse(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4611686018427387904})");
  EXPECT_EQ(c.Resolve(4).message(),
            "train_batch_size: micro batch * world size = 4611686018427387904 * 4 * 1 does not "
            "fit in 64 bits");
  c = Parse(R"({"train_batch_size": 8, "gradient_accumulation_steps": 4611686018427387904})");
  EXPECT_FALSE(c.Resolve(4).ok());
  // The largest products that fit still resolve.
  c = Parse(R"({"train_micro_batch_size_per_gpu": 1073741824,
    "gradient_accumulation_steps": 1073741824})");
  Config big = c;
  ASSERT_TRUE(big.Resolve(4).ok());
  EXPECT_EQ(big.train_batch_size, int64_t{1} << 62);
  EXPECT_FALSE(c.Resolve(8).ok());  // 2^63
}

}  // namespace
}  // namespace zero
