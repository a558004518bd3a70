// The engine's configuration: one struct, filled from a DeepSpeed
// ds_config.json (ParseDsConfig) or by the C ABI from zero_config. Key names
// and defaults follow DeepSpeed; docs/DEEPSPEED_COMPAT.md lists every key with
// its status (takes effect, accepted without effect, refused). A field here is
// read by the engine; keys that change nothing have no field and are listed
// in Config::no_effect_keys instead.
#ifndef ZERO_CORE_CONFIG_CONFIG_H_
#define ZERO_CORE_CONFIG_CONFIG_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/dtype.h"

namespace zero {

enum class OptimizerType { kAdam, kAdamW, kSgd, kLion, kAdagrad, kMuon };
enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };
// How Adam's moments are stored (kernels/moments_format_math.h; the values
// are math::MomentsFormat's and a checkpoint manifest's).
enum class MomentsFormat { kF32 = 0, kBf16 = 1, kQ8 = 2 };
// "fp32", "bf16", "8bit": optimizer.moments_format's values.
const char* MomentsFormatName(MomentsFormat f);

// Where offloaded state lives: decided once here, read as this enum.
enum class OffloadDevice { kNone, kCpu, kNvme };
const char* OffloadDeviceName(OffloadDevice d);

// offload_param reads device, nvme_path and pin_memory (with state on a GPU:
// the page-locked host shard); buffer_count is offload_optimizer's
// (offload_param's is reported as without effect).
struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int buffer_count = 4;     // nvme: host buffers the state streams through
  bool pin_memory = false;  // GPU: page-locked host staging
  // nvme (zero's key, not DeepSpeed's): two slots per file and a step that
  // flips them only after every rank wrote all of its state; twice the disk.
  // Off: one slot, and a step that fails mid-write fails the engine
  // (docs/ARCHITECTURE.md, "Offload").
  bool atomic_step = false;
  // offload_optimizer "cpu" on a GPU (zero's key, not DeepSpeed's): the
  // ZeRO-Offload paper's one-step delayed parameter update; the host update
  // of step t runs behind step t+1's forward and backward, which use the
  // params of step t-1's update (docs/ARCHITECTURE.md, "Offload").
  bool delayed_update = false;
};

struct AioConfig {
  int64_t block_size = 1048576;
  int queue_depth = 8;
};

// DeepSpeed's wall_clock_breakdown and comms_logger, and zero's zero_trace.
struct ObserveConfig {
  bool wall_clock_breakdown = false;  // per-step breakdown, printed every steps_per_print
  bool comms_logger = false;          // comms_logger.enabled
  bool comms_verbose = false;         // comms_logger.verbose: each collective on rank 0
  bool comms_prof_all = true;         // comms_logger.prof_all; false: only comms_prof_ops
  std::vector<std::string> comms_prof_ops;  // "all_reduce", "all_gather", ...
  std::string trace_path;             // zero_trace.path ("" = off); "{rank}" or .rankN added
  int64_t trace_start_step = 0;       // zero_trace.start_step: first optimizer step traced
  int64_t trace_end_step = 1;         // zero_trace.end_step: first step not traced
};

// Alternatives to the engine's default paths that give the same bits, for
// the tests that check they agree and the benchmarks' side-by-side runs.
// Each engine reads its own (no ds_config key or C ABI field sets them).
struct EnginePaths {
  // The optimizer boundary's second pass fused (raw gradients cast per tile,
  // zeroed once read) on devices that have it, or the separate cast, update
  // and zeroing passes it replaced (OptimizerBoundary::Step).
  bool fused_boundary = true;
  // Stage 3's streamed update (gradients and working params in files) reads
  // gradients ahead and writes working copies behind on IO threads
  // (core/engine/update_io_pipeline.h), or blocking on the caller's thread.
  bool update_io_pipeline = true;
  // An fp32 model's master weights are its working copy's owned range when
  // both are in the engine's device memory (OffloadPlacement), or a buffer
  // of their own.
  bool fp32_master_aliasing = true;
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
  int steps_per_print = 10;

  OptimizerType optimizer = OptimizerType::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  bool adam_w_mode = true;
  // optimizer.moments_format, or bf16.bf16_optimizer_states.
  MomentsFormat moments_format = MomentsFormat::kF32;
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  // Muon (DeepSpeed's MuonWithAuxAdam, core/optim/muon_optimizer.cc): the
  // hidden matrices' momentum, Nesterov blend and Newton-Schulz steps; each
  // half's learning rate (negative: `lr`), scaled alike by a schedule.
  double muon_momentum = 0.95;
  bool muon_nesterov = true;
  int muon_ns_steps = 5;
  double muon_lr = -1.0, adam_lr = -1.0;

  SchedulerType scheduler = SchedulerType::kNone;
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = -1;
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;

  // Gradient averaging, DeepSpeed's: with prescale_gradients each rank's
  // gradient is multiplied by 1/world before the reduction and by nothing
  // after; otherwise by 1/gradient_predivide_factor before and by
  // gradient_predivide_factor/world after (factor 1: the sum times 1/world).
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;

  // zero_optimization
  int stage = 0;
  int64_t reduce_bucket_size = 500000000;
  // false: stages 1-3 all-reduce each bucket (stage 1: the flat gradient)
  // and each rank keeps its shard, instead of reduce-scattering.
  bool reduce_scatter = true;
  // communication_data_type (top level): the dtype gradients are reduced
  // in (fp32, fp16 or bf16; GradientReducer). Unset (the key absent or
  // null): DeepSpeed's default, the working dtype (fp16 with fp16 enabled,
  // bf16 with bf16, else fp32; docs/DEEPSPEED_COMPAT.md), which Resolve
  // fills in. Read it through CommDType().
  std::optional<DType> communication_data_type;
  // Stages 1-2: the all-gathers that publish the updated working copy move
  // at most this many elements each (ShardedState::AllGatherWorking).
  int64_t allgather_bucket_size = 500000000;
  int overlap_comm = -1;  // -1: DeepSpeed's default (on for stage 3 only)
  int64_t sub_group_size = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  // Sized from the model at finalize (Engine::ResolveAuto, as the HF
  // integration sizes "auto": hidden^2 from the largest 2-D trainable
  // param). ParseDsConfig sets these when the value is "auto" or the key is
  // absent, so a ds_config that names no sizes pays no buffers proportional
  // to the whole model; a key set to any number (DeepSpeed's default too)
  // keeps that number. Configs built in code, and the C ABI's zero_config,
  // keep the values they hold unless they set these.
  bool reduce_bucket_size_auto = false;
  bool stage3_prefetch_bucket_size_auto = false;
  bool stage3_param_persistence_threshold_auto = false;
  OffloadConfig offload_optimizer;
  OffloadConfig offload_param;
  AioConfig aio;

  // Beyond one node (docs/ARCHITECTURE.md, "Nodes, hybrid sharding and
  // ZeRO++"). Ranks per node: -1 = from the launcher's environment
  // (core/comm/topology.h); > 0 overrides it (zero's own key
  // "zero_ranks_per_node", for tests and odd launchers).
  int64_t ranks_per_node = -1;
  // Hybrid sharding (MiCS "mics_shard_size", FSDP "HYBRID_SHARD"): states
  // sharded within groups of this many consecutive ranks, replicated across
  // groups. -1: off (shard over all ranks). hybrid_shard_per_node: the
  // FSDP name, resolved to ranks_per_node when the engine is created.
  int64_t mics_shard_size = -1;
  bool hybrid_shard_per_node = false;
  // hpZ (stage 3): a secondary copy of each gathered param sharded within
  // groups of this many consecutive ranks, so later gathers of the step stay
  // in the group. 1: off.
  int64_t hpz_partition_size = 1;
  // qwZ / qgZ (stage 3): the weight all-gather in int8 blocks; the gradient
  // reduce-scatter hierarchical (fp32 inside a node, int8 or int4 blocks
  // across nodes, fp32 accumulation). Block: values per fp32 scale.
  bool quantized_weights = false;
  bool quantized_gradients = false;
  int quantized_gradients_bits = 8;
  bool quantized_gradients_error_feedback = true;
  int quantization_block_size = 128;

  // zero's own key (DeepSpeed has none): a collective waits this long for
  // its peers before it fails with a timeout on every rank that arrived.
  double comm_timeout_seconds = 300.0;
  // zero's own key: collectives each rank's flight recorder keeps
  // (docs/ARCHITECTURE.md, "Flight recorder"); 0 keeps none.
  int64_t flight_recorder_size = 256;
  // DeepSpeed's zero_optimization.ignore_unused_parameters: a param some
  // ranks hand no gradient for counts as their zero gradient (true), or is
  // an error naming it on every rank (false).
  bool ignore_unused_parameters = true;

  // Observing a run (docs/ARCHITECTURE.md, "Observing a run"):
  // wall_clock_breakdown, comms_logger, zero_trace.
  ObserveConfig observe;

  // Which of two equivalent implementations the engine runs (EnginePaths).
  EnginePaths engine_paths;

  // Full paths of the keys in the parsed JSON that zero accepts and that
  // change nothing ("zero_optimization.allgather_bucket_size", "tensorboard"),
  // in parse order. A key is listed when present (not null) with any value
  // other than its inert value, the one that describes what zero does anyway
  // ("reduce_scatter": true, "wall_clock_breakdown": false, a block with
  // "enabled": false); keys with no inert value are listed whenever present.
  // Empty for configs built in code or by the C ABI. See NoEffectReport and
  // docs/DEEPSPEED_COMPAT.md.
  std::vector<std::string> no_effect_keys;
  // Keys that take effect only where the engine's state is in device memory
  // (offload_param "cpu", its pin_memory, cpu_offload_param: stage 3's shard
  // moves to the host); the engine reports them at finalize on a
  // host-memory device, when it knows, the way no_effect_keys are.
  std::vector<std::string> device_only_keys;
  // "zero_allow_untested_keys": false makes either list an error.
  bool allow_untested_keys = true;

  // The dtype gradient reductions run in: communication_data_type where
  // set, else DeepSpeed's default (the working dtype).
  DType CommDType() const { return communication_data_type.value_or(dtype); }

  bool OverlapComm() const {
    return overlap_comm < 0 ? stage == 3 : overlap_comm != 0;
  }

  // Checks ranges and cross-field rules, fills batch sizes from the
  // data-parallel world size. Errors name the key path.
  absl::Status Resolve(int world_size);
};

// Parses the text of a ds_config.json. Unknown keys, wrong types and values
// out of range are InvalidArgument errors naming the key path, e.g.
// "zero_optimization.stage: expected 0..3, got 4". Line comments (`//`, `#`)
// and block comments (`/* */`) outside strings are allowed. Keys accepted
// without effect are recorded in no_effect_keys; zero's own top-level key
// "zero_allow_untested_keys": false (default true) makes any of them an
// error naming the key path instead.
absl::StatusOr<Config> ParseDsConfig(const std::string& json_text);

// ParseDsConfig, also adding to `keys_read` the path of every key the parser
// looked up, present in the text or not: the keys it knows on the branches
// this text takes (the optimizer and scheduler types, the sections present).
// docs/DEEPSPEED_COMPAT.md is checked against them.
absl::StatusOr<Config> ParseDsConfigKeysRead(const std::string& json_text,
                                             std::set<std::string>* keys_read);

// One line for rank 0 to print at startup, or "" when no_effect_keys is
// empty: `[zero] accepted without effect: a, b (set
// "zero_allow_untested_keys": false to make these errors)`.
std::string NoEffectReport(const Config& c);

}  // namespace zero

#endif  // ZERO_CORE_CONFIG_CONFIG_H_
