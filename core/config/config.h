// The engine's configuration: one struct, filled from a DeepSpeed
// ds_config.json (ParseDsConfig) or by the C ABI from zero_config. Key names
// and defaults follow DeepSpeed (docs/DEEPSPEED_COMPAT.md).
#ifndef ZERO_CORE_CONFIG_CONFIG_H_
#define ZERO_CORE_CONFIG_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/common/dtype.h"

namespace zero {

enum class OptimizerType { kAdam, kAdamW, kSgd };
enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };

// Where offloaded state lives: decided once here, read as this enum.
enum class OffloadDevice { kNone, kCpu, kNvme };
const char* OffloadDeviceName(OffloadDevice d);

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int buffer_count = 4;
  int64_t buffer_size = 100000000;
  int64_t max_in_cpu = 1000000000;
  bool pin_memory = false;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;
};

struct AioConfig {
  int64_t block_size = 1048576;
  int queue_depth = 8;
  int intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};

struct Config {
  // Batch arithmetic; -1 = unset ("auto" or absent). Resolve() fills them.
  int64_t train_batch_size = -1;
  int64_t train_micro_batch_size_per_gpu = -1;
  int64_t gradient_accumulation_steps = -1;

  DType dtype = DType::kF32;  // working params and gradients

  // fp16 dynamic loss scaler (loss_scale > 0: static).
  double loss_scale = 0.0;
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;

  double gradient_clipping = 0.0;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  int steps_per_print = 10;

  OptimizerType optimizer = OptimizerType::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  bool adam_w_mode = true;
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;

  SchedulerType scheduler = SchedulerType::kNone;
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = -1;
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;

  // zero_optimization
  int stage = 0;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  bool allgather_partitions = true;
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  int overlap_comm = -1;  // -1: DeepSpeed's default (on for stage 3 only)
  bool load_from_fp32_weights = true;
  int64_t sub_group_size = 1000000000;
  bool round_robin_gradients = false;
  bool ignore_unused_parameters = true;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  // "auto" values, resolved from the model at finalize (as the HF
  // integration does: hidden^2 from the largest 2-D param).
  bool reduce_bucket_size_auto = false;
  bool stage3_prefetch_bucket_size_auto = false;
  bool stage3_param_persistence_threshold_auto = false;
  OffloadConfig offload_optimizer;
  OffloadConfig offload_param;
  AioConfig aio;

  // zero's own key (DeepSpeed has none): a collective waits this long for
  // its peers before it fails with a timeout on every rank that arrived.
  double comm_timeout_seconds = 300.0;

  bool OverlapComm() const {
    return overlap_comm < 0 ? stage == 3 : overlap_comm != 0;
  }

  // Checks ranges and cross-field rules, fills batch sizes from the
  // data-parallel world size. Errors name the key path.
  absl::Status Resolve(int world_size);
};

// Parses the text of a ds_config.json. Unknown keys, wrong types and values
// out of range are InvalidArgument errors naming the key path, e.g.
// "zero_optimization.stage: expected 0..3, got 4".
absl::StatusOr<Config> ParseDsConfig(const std::string& json_text);

}  // namespace zero

#endif  // ZERO_CORE_CONFIG_CONFIG_H_
