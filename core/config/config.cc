// Config's own rules: ranges and cross-field checks, batch arithmetic.
#include "core/config/config.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace zero {

const char* OffloadDeviceName(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kCpu: return "cpu";
    case OffloadDevice::kNvme: return "nvme";
    case OffloadDevice::kNone: break;
  }
  return "none";
}

const char* MomentsFormatName(MomentsFormat f) {
  switch (f) {
    case MomentsFormat::kBf16: return "bf16";
    case MomentsFormat::kQ8: return "8bit";
    case MomentsFormat::kF32: break;
  }
  return "fp32";
}

absl::Status Config::Resolve(int world_size) {
  if (stage < 0 || stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("zero_optimization.stage: expected 0..3, got ", stage));
  }
  if (offload_param.device != OffloadDevice::kNone && stage != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.offload_param.device: expected \"none\" below "
        "stage 3, got \"", OffloadDeviceName(offload_param.device), "\""));
  }
  // On the CPU device optimizer states and params already live in host
  // memory, so "cpu" offload is where they are; NVMe is a separate tier.
  // offload_optimizer "nvme" streams master weights and moments through
  // files under nvme_path (core/offload/nvme_tier.h), in every stage;
  // offload_param "nvme" keeps stage 3's own working shard in files
  // (core/offload/param_file.h).
  if (offload_optimizer.device == OffloadDevice::kNvme && offload_optimizer.nvme_path.empty()) {
    return absl::InvalidArgumentError(
        "zero_optimization.offload_optimizer.nvme_path: required when device is \"nvme\"");
  }
  if (offload_param.device == OffloadDevice::kNvme && offload_param.nvme_path.empty()) {
    return absl::InvalidArgumentError(
        "zero_optimization.offload_param.nvme_path: required when device is \"nvme\"");
  }
  if (moments_format != MomentsFormat::kF32 && optimizer != OptimizerType::kAdam &&
      optimizer != OptimizerType::kAdamW) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.moments_format: \"", MomentsFormatName(moments_format),
        "\" is for Adam and AdamW only (their exp_avg and exp_avg_sq)"));
  }
  // 8-bit blocks of 64 elements (kernels/moments_format_math.h) never
  // straddle an update piece.
  if (moments_format == MomentsFormat::kQ8 && sub_group_size % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.sub_group_size: expected a multiple of 64 with "
        "optimizer.moments_format \"8bit\", got ", sub_group_size));
  }
  // Configs built in code or by the C ABI reach the engine without the
  // parser's range checks.
  if (allgather_bucket_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.allgather_bucket_size: expected an integer >= 1, got ",
        allgather_bucket_size));
  }
  if (!(gradient_predivide_factor > 0.0 && std::isfinite(gradient_predivide_factor))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient_predivide_factor: expected a finite number > 0, got ",
        gradient_predivide_factor));
  }
  // DeepSpeed's engine reduces in the configured dtype, else fp16 with fp16
  // enabled, else bf16 with bf16, else fp32 (docs/DEEPSPEED_COMPAT.md).
  if (!communication_data_type.has_value()) communication_data_type = dtype;
  if (*communication_data_type != DType::kF32 && *communication_data_type != DType::kF16 &&
      *communication_data_type != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "communication_data_type: expected fp32, fp16 or bf16, got ",
        DTypeName(*communication_data_type)));
  }
  // Batch arithmetic: train = micro * gas * world; any two give the third.
  // Products are overflow-checked: huge values from a ds_config or the C
  // struct are an error, not a wrapped (undefined) product.
  int64_t& tb = train_batch_size;
  int64_t& mb = train_micro_batch_size_per_gpu;
  int64_t& gas = gradient_accumulation_steps;
  const int64_t w = world_size;
  auto product = [&](int64_t a, int64_t b, int64_t c, const char* what,
                     int64_t* out) -> absl::Status {
    if (__builtin_mul_overflow(a, b, out) || __builtin_mul_overflow(*out, c, out)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train_batch_size: ", what, " = ", a, " * ", b, " * ", c,
          " does not fit in 64 bits"));
    }
    return absl::OkStatus();
  };
  constexpr const char* kAll =
      "train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size";
  int64_t p = 0;
  if (tb > 0 && mb > 0 && gas > 0) {
    absl::Status s = product(mb, gas, w, kAll, &p);
    if (!s.ok()) return s;
    if (tb != p) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train_batch_size: expected ", kAll, " = ", mb, " * ", gas, " * ", w, " = ", p,
          ", got ", tb));
    }
  } else if (tb > 0 && mb > 0) {
    absl::Status s = product(mb, w, 1, "micro batch * world size", &p);
    if (!s.ok()) return s;
    if (tb % p != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train_batch_size: expected a multiple of micro batch * world size (", p, "), got ",
          tb));
    }
    gas = tb / p;
  } else if (tb > 0 && gas > 0) {
    absl::Status s = product(gas, w, 1, "gradient_accumulation_steps * world size", &p);
    if (!s.ok()) return s;
    if (tb % p != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train_batch_size: expected a multiple of gradient_accumulation_steps"
          " * world size (", p, "), got ", tb));
    }
    mb = tb / p;
  } else if (tb > 0) {
    gas = 1;
    if (tb % w != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train_batch_size: expected a multiple of world size ", w, ", got ", tb));
    }
    mb = tb / w;
  } else {
    if (gas <= 0) gas = 1;
    if (mb <= 0) mb = 1;
    absl::Status s = product(mb, gas, w, kAll, &tb);
    if (!s.ok()) return s;
  }
  // Beyond one node (docs/ARCHITECTURE.md, "Nodes, hybrid sharding and
  // ZeRO++"). Sizes that depend on the topology are checked again when the
  // engine is created (core/engine/hierarchy.cc).
  const bool hybrid = mics_shard_size > 0 || hybrid_shard_per_node;
  if (hybrid && stage < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.", hybrid_shard_per_node ? "sharding_strategy" : "mics_shard_size",
        ": hybrid sharding shards states within groups: needs stage 1, 2 or 3, got stage ",
        stage));
  }
  if (mics_shard_size > 0 && w % mics_shard_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.mics_shard_size: expected a divisor of the world size ", w,
        ", got ", mics_shard_size));
  }
  if (hpz_partition_size > 1 && w % hpz_partition_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.zero_hpz_partition_size: expected a divisor of the world size ", w,
        ", got ", hpz_partition_size));
  }
  const char* zpp = hpz_partition_size > 1 ? "zero_hpz_partition_size"
                    : quantized_weights    ? "zero_quantized_weights"
                    : quantized_gradients  ? "zero_quantized_gradients"
                                           : nullptr;
  if (zpp != nullptr && stage != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.", zpp, ": ZeRO++ (hpZ, qwZ, qgZ) applies to stage 3, got stage ",
        stage));
  }
  if (zpp != nullptr && hybrid && (mics_shard_size != w || hybrid_shard_per_node)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.", zpp, ": not combined with hybrid sharding (mics_shard_size / "
        "HYBRID_SHARD) in zero; use one or the other"));
  }
  if (quantized_gradients && !reduce_scatter) {
    return absl::InvalidArgumentError(
        "zero_optimization.zero_quantized_gradients: quantizes the gradient reduce-scatter; "
        "reduce_scatter is false");
  }
  if (quantized_gradients_bits != 4 && quantized_gradients_bits != 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.zero_quantized_gradients_bits: expected 4 or 8, got ",
        quantized_gradients_bits));
  }
  if (quantization_block_size < 1 || quantization_block_size > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.zero_quantization_block_size: expected 1..4096, got ",
        quantization_block_size));
  }
  if (dtype != DType::kF16) loss_scale = 1.0;  // no scaling outside fp16
  if (scheduler == SchedulerType::kWarmupCosineLR && total_num_steps < 1) {
    return absl::InvalidArgumentError(
        "scheduler.params.total_num_steps: required for WarmupCosineLR");
  }
  return absl::OkStatus();
}

}  // namespace zero
