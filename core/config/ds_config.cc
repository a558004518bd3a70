// ParseDsConfig: a DeepSpeed ds_config.json into Config, section by section
// (docs/DEEPSPEED_COMPAT.md lists every key and what it does here).
#include "core/config/config.h"
#include "core/config/json_reader.h"

namespace zero {
namespace {

using config_internal::json;
using config_internal::ObjectReader;
using config_internal::ParseJson;
using config_internal::Show;

absl::Status ParseOffload(const json& v, const std::string& path,
                          OffloadConfig* o, bool is_param,
                          std::vector<std::string>* no_effect,
                          std::vector<std::string>* device_only) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, path, no_effect));
  std::string device = OffloadDeviceName(o->device);
  RETURN_IF_ERROR(r.String("device", &device, {"none", "cpu", "nvme"}));
  o->device = device == "cpu"    ? OffloadDevice::kCpu
              : device == "nvme" ? OffloadDevice::kNvme
                                 : OffloadDevice::kNone;
  RETURN_IF_ERROR(r.String("nvme_path", &o->nvme_path));
  RETURN_IF_ERROR(r.Bool("atomic_step", &o->atomic_step));
  if (is_param) {
    // "cpu" (and its pin_memory) move stage 3's working shard to host memory
    // only when the state is on a GPU (core/engine/sharded_state.h); on the
    // CPU device, where it is host memory already, they do nothing: the
    // engine reports them at finalize, once it knows the device.
    if (o->device == OffloadDevice::kCpu) device_only->push_back(path + ".device");
    RETURN_IF_ERROR(r.NoEffectInt("buffer_count", 1, 1024));
    RETURN_IF_ERROR(r.NoEffectInt("buffer_size", 1, INT64_MAX));
    RETURN_IF_ERROR(r.NoEffectInt("max_in_cpu", 0, INT64_MAX));
    RETURN_IF_ERROR(r.Bool("pin_memory", &o->pin_memory));
    if (o->pin_memory) device_only->push_back(path + ".pin_memory");
  } else {
    RETURN_IF_ERROR(r.Int("buffer_count", &o->buffer_count, 1, 1024));
    RETURN_IF_ERROR(r.Bool("pin_memory", &o->pin_memory));
    RETURN_IF_ERROR(r.Bool("delayed_update", &o->delayed_update));
    // "cpu" moves the fp32 master and moments off a GPU
    // (core/engine/optimizer_state_store.cc); on the CPU device they are in
    // host memory already: reported at finalize as offload_param's "cpu" is,
    // unless delayed_update (which keeps them apart from the working copy
    // there too: docs/ARCHITECTURE.md, "The delayed update").
    if (o->device == OffloadDevice::kCpu) {
      if (!o->delayed_update) device_only->push_back(path + ".device");
      if (o->pin_memory) device_only->push_back(path + ".pin_memory");
    }
    // NVMe reads and writes are always pipelined (core/offload/nvme_tier.h).
    RETURN_IF_ERROR(r.NoEffectBool("pipeline_read", true));
    RETURN_IF_ERROR(r.NoEffectBool("pipeline_write", true));
    r.NoEffect("pipeline", true);
    RETURN_IF_ERROR(r.NoEffectBool("fast_init", false));
    // All of the optimizer state is offloaded (no partial offload).
    RETURN_IF_ERROR(r.NoEffectNum("ratio", 0.0, 1.0, 1.0));
  }
  if (o->device == OffloadDevice::kNvme && o->nvme_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".nvme_path: required when device is \"nvme\""));
  }
  return r.Finish();
}

// A size that is "auto" or absent is sized from the model at finalize
// (Config::reduce_bucket_size_auto and its kin); any number is kept.
absl::Status ModelSizedInt(ObjectReader& r, const std::string& key, int64_t* out,
                           int64_t lo, bool* from_model) {
  *from_model = r.Find(key) == nullptr;
  return r.Int(key, out, lo, INT64_MAX, from_model);
}

absl::Status ParseZero(const json& v, Config* c) {
  const std::string p = "zero_optimization";
  if (v.is_boolean()) {  // deprecated: true means stage 1
    c->stage = v.get<bool>() ? 1 : 0;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, p, &c->no_effect_keys));
  int64_t stage = c->stage;
  RETURN_IF_ERROR(r.Int("stage", &stage, 0, 3));
  c->stage = static_cast<int>(stage);
  // The caller writes each gradient straight into its bucket slot
  // (grad_buffer), so there is no copy into a contiguous buffer to skip, and
  // zero all-gathers updated partitions: the inert values are DeepSpeed's
  // defaults (docs/DEEPSPEED_COMPAT.md says why false has no effect).
  RETURN_IF_ERROR(r.NoEffectBool("contiguous_gradients", true));
  // false: all-reduce instead of reduce-scatter (stages 1-3; stage 0 always
  // all-reduces).
  RETURN_IF_ERROR(r.Bool("reduce_scatter", &c->reduce_scatter));
  RETURN_IF_ERROR(r.NoEffectBool("allgather_partitions", true));
  RETURN_IF_ERROR(ModelSizedInt(r, "reduce_bucket_size", &c->reduce_bucket_size, 1,
                                &c->reduce_bucket_size_auto));
  // Stages 1-2 publish the working copy in all-gathers of at most this many
  // elements; stage 0 has no all-gather and stage 3 gathers param by param
  // (stage3_prefetch_bucket_size), as in DeepSpeed, so there it is reported.
  RETURN_IF_ERROR(r.Int("allgather_bucket_size", &c->allgather_bucket_size, 1,
                        INT64_MAX));
  if ((c->stage == 0 || c->stage == 3) && r.Find("allgather_bucket_size")) {
    r.Note("allgather_bucket_size");
  }
  if (const json* o = r.Find("overlap_comm")) {
    if (!o->is_boolean()) return r.Bad("overlap_comm", "true or false", *o, false);
    c->overlap_comm = o->get<bool>() ? 1 : 0;
  }
  // A checkpoint restores the fp32 master weights it holds.
  RETURN_IF_ERROR(r.NoEffectBool("load_from_fp32_weights", true));
  RETURN_IF_ERROR(r.Int("sub_group_size", &c->sub_group_size, 1, INT64_MAX));
  RETURN_IF_ERROR(r.NoEffectBool("round_robin_gradients", false));
  RETURN_IF_ERROR(r.Bool("ignore_unused_parameters", &c->ignore_unused_parameters));
  RETURN_IF_ERROR(ModelSizedInt(r, "stage3_prefetch_bucket_size",
                                &c->stage3_prefetch_bucket_size, 0,
                                &c->stage3_prefetch_bucket_size_auto));
  RETURN_IF_ERROR(ModelSizedInt(r, "stage3_param_persistence_threshold",
                                &c->stage3_param_persistence_threshold, 0,
                                &c->stage3_param_persistence_threshold_auto));
  RETURN_IF_ERROR(r.Int("stage3_max_live_parameters",
                        &c->stage3_max_live_parameters, 0, INT64_MAX));
  RETURN_IF_ERROR(r.NoEffectInt("stage3_max_reuse_distance", 0, INT64_MAX));
  // Read by the bindings' 16-bit model save (zero.torch save_16bit_model
  // saves at stage 3 only when true, as DeepSpeed): it has its effect there,
  // so it is type-checked here and not reported.
  bool gather_16bit_on_save = false;
  RETURN_IF_ERROR(
      r.Bool("stage3_gather_16bit_weights_on_model_save", &gather_16bit_on_save));
  // DeepSpeed's older alias of the key above.
  RETURN_IF_ERROR(
      r.Bool("stage3_gather_fp16_weights_on_model_save", &gather_16bit_on_save));
  if (const json* o = r.Find("offload_optimizer")) {
    RETURN_IF_ERROR(ParseOffload(*o, p + ".offload_optimizer",
                                 &c->offload_optimizer, false,
                                 &c->no_effect_keys, &c->device_only_keys));
  }
  if (const json* o = r.Find("offload_param")) {
    RETURN_IF_ERROR(ParseOffload(*o, p + ".offload_param", &c->offload_param,
                                 true, &c->no_effect_keys, &c->device_only_keys));
  }
  bool cpu_offload = false, cpu_offload_param = false;
  RETURN_IF_ERROR(r.Bool("cpu_offload", &cpu_offload));
  RETURN_IF_ERROR(r.Bool("cpu_offload_param", &cpu_offload_param));
  if (cpu_offload) {
    c->offload_optimizer.device = OffloadDevice::kCpu;
    c->device_only_keys.push_back(p + ".cpu_offload");  // as offload_optimizer "cpu"
  }
  if (cpu_offload_param) {
    c->offload_param.device = OffloadDevice::kCpu;
    c->device_only_keys.push_back(p + ".cpu_offload_param");  // as offload_param "cpu"
  }
  // Beyond one node (docs/ARCHITECTURE.md, "Nodes, hybrid sharding and
  // ZeRO++"); the engine checks them against the world and the topology.
  RETURN_IF_ERROR(r.Int("zero_hpz_partition_size", &c->hpz_partition_size, 1, 1 << 20));
  RETURN_IF_ERROR(r.Int("mics_shard_size", &c->mics_shard_size, -1, 1 << 20));
  if (c->mics_shard_size == 0) {
    return absl::InvalidArgumentError(
        p + ".mics_shard_size: expected -1 (off) or a group size >= 1, got 0");
  }
  {
    std::string strategy = "full_shard";
    RETURN_IF_ERROR(r.String("sharding_strategy", &strategy, {"full_shard", "hybrid_shard"}));
    c->hybrid_shard_per_node = absl::AsciiStrToLower(strategy) == "hybrid_shard";
  }
  RETURN_IF_ERROR(r.Bool("zero_quantized_weights", &c->quantized_weights));
  RETURN_IF_ERROR(r.Bool("zero_quantized_gradients", &c->quantized_gradients));
  RETURN_IF_ERROR(r.Int("zero_quantized_gradients_bits", &c->quantized_gradients_bits, 4, 8));
  if (c->quantized_gradients_bits != 4 && c->quantized_gradients_bits != 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        p, ".zero_quantized_gradients_bits: expected 4 or 8, got ",
        c->quantized_gradients_bits));
  }
  RETURN_IF_ERROR(r.Bool("zero_quantized_gradients_error_feedback",
                         &c->quantized_gradients_error_feedback));
  RETURN_IF_ERROR(r.Int("zero_quantization_block_size", &c->quantization_block_size, 1, 4096));
  // Checkpoints always reshard to any world size; zero does not touch model
  // code (memory_efficient_linear, override_module_apply).
  r.NoEffect("elastic_checkpoint");
  r.NoEffect("memory_efficient_linear");
  r.NoEffect("override_module_apply");
  for (const char* k : {"zero_quantized_nontrainable_weights",
                        "mics_hierarchical_params_gather",
                        "pipeline_loading_checkpoint",
                        "use_all_reduce_for_fetch_params", "legacy_stage1",
                        "log_trace_cache_warnings"}) {
    r.NoEffect(k, false);
  }
  return r.Finish();
}

// Muon's own keys (DeepSpeed's MuonWithAuxAdam): the hidden matrices'
// momentum, Nesterov and Newton-Schulz steps, each half's lr; both
// Newton-Schulz methods compute the same iteration (docs/DEEPSPEED_COMPAT.md).
absl::Status ParseMuonParams(ObjectReader* pr, Config* c) {
  RETURN_IF_ERROR(pr->Num("momentum", &c->muon_momentum, 0.0, 0.999999));
  RETURN_IF_ERROR(pr->Bool("nesterov", &c->muon_nesterov));
  RETURN_IF_ERROR(pr->Int("ns_steps", &c->muon_ns_steps, 0, 100));
  RETURN_IF_ERROR(pr->Num("muon_lr", &c->muon_lr, 0.0, 1e6));
  RETURN_IF_ERROR(pr->Num("adam_lr", &c->adam_lr, 0.0, 1e6));
  std::string method = "gram";
  RETURN_IF_ERROR(pr->String("ns_method", &method, {"gram", "standard"}));
  pr->NoEffect("ns_method");  // both methods: the same fp32 iteration
  bool per_head = false;
  RETURN_IF_ERROR(pr->Bool("per_head_muon", &per_head));
  if (per_head) {
    return absl::InvalidArgumentError(
        "optimizer.params.per_head_muon: expected false (per-head Newton-Schulz is not "
        "implemented), got true");
  }
  return pr->Finish();
}

absl::Status ParseOptimizer(const json& v, Config* c) {
  ASSIGN_OR_RETURN(ObjectReader r,
                   ObjectReader::Make(v, "optimizer", &c->no_effect_keys));
  std::string type = "adamw";
  RETURN_IF_ERROR(r.String("type", &type));
  std::string t = absl::AsciiStrToLower(type);
  // zero's own key (docs/DEEPSPEED_COMPAT.md): how Adam's moments are stored.
  std::string moments = "fp32";
  RETURN_IF_ERROR(r.String("moments_format", &moments, {"fp32", "bf16", "8bit"}));
  c->moments_format = moments == "bf16"   ? MomentsFormat::kBf16
                      : moments == "8bit" ? MomentsFormat::kQ8
                                          : MomentsFormat::kF32;
  if (t == "adam") {
    c->optimizer = OptimizerType::kAdam;
  } else if (t == "adamw") {
    c->optimizer = OptimizerType::kAdamW;
  } else if (t == "sgd") {
    c->optimizer = OptimizerType::kSgd;
  } else if (t == "lion") {
    c->optimizer = OptimizerType::kLion;
  } else if (t == "adagrad") {
    // DeepSpeedCPUAdagrad's defaults where the params leave them out.
    c->optimizer = OptimizerType::kAdagrad;
    c->lr = 1e-2;
    c->eps = 1e-10;
  } else if (t == "muon") {
    c->optimizer = OptimizerType::kMuon;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.type: expected one of Adam, AdamW, SGD, Lion, Adagrad, Muon, got \"", type,
        "\"", (t == "lamb" || t == "onebitadam" || t == "onebitlamb")
                  ? " (a DeepSpeed optimizer zero does not implement)"
                  : ""));
  }
  const json* params = r.Find("params");
  RETURN_IF_ERROR(r.Finish());
  if (!params) return absl::OkStatus();
  ASSIGN_OR_RETURN(ObjectReader pr, ObjectReader::Make(*params, "optimizer.params",
                                                       &c->no_effect_keys));
  RETURN_IF_ERROR(pr.Num("lr", &c->lr, 0.0, 1e6));
  RETURN_IF_ERROR(pr.Num("weight_decay", &c->weight_decay, 0.0, 1e6));
  if (c->optimizer == OptimizerType::kSgd) {
    RETURN_IF_ERROR(pr.Num("momentum", &c->momentum, 0.0, 1.0));
    RETURN_IF_ERROR(pr.Num("dampening", &c->dampening, 0.0, 1.0));
    RETURN_IF_ERROR(pr.Bool("nesterov", &c->nesterov));
    return pr.Finish();
  }
  if (c->optimizer == OptimizerType::kAdagrad) {
    RETURN_IF_ERROR(pr.Num("eps", &c->eps, 0.0, 1.0));
    RETURN_IF_ERROR(pr.NoEffectBool("amsgrad", false));  // DeepSpeed ignores it too
    return pr.Finish();
  }
  if (const json* b = pr.Find("betas")) {
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() ||
        !(*b)[1].is_number() || (*b)[0].get<double>() < 0 ||
        (*b)[0].get<double>() >= 1 || (*b)[1].get<double>() < 0 ||
        (*b)[1].get<double>() >= 1) {
      return pr.Bad("betas", "[beta1, beta2] with each in [0, 1)", *b, false);
    }
    c->beta1 = (*b)[0].get<double>();
    c->beta2 = (*b)[1].get<double>();
  }
  if (c->optimizer == OptimizerType::kLion) return pr.Finish();
  RETURN_IF_ERROR(pr.Num("eps", &c->eps, 0.0, 1.0));
  RETURN_IF_ERROR(pr.Bool("adam_w_mode", &c->adam_w_mode));
  if (c->optimizer == OptimizerType::kMuon) return ParseMuonParams(&pr, c);
  bool amsgrad = false, bias_correction = true;
  // zero's own Adam, whatever implementation torch_adam asks for.
  RETURN_IF_ERROR(pr.NoEffectBool("torch_adam", false));
  RETURN_IF_ERROR(pr.Bool("amsgrad", &amsgrad));
  RETURN_IF_ERROR(pr.Bool("bias_correction", &bias_correction));
  if (amsgrad) return absl::InvalidArgumentError("optimizer.params.amsgrad: expected false (not implemented), got true");
  if (!bias_correction) return absl::InvalidArgumentError("optimizer.params.bias_correction: expected true (not implemented), got false");
  // torch implementation switches: no effect on zero's optimizer.
  pr.NoEffect("fused");
  pr.NoEffect("foreach");
  pr.NoEffect("capturable");
  pr.NoEffect("maximize", false);
  return pr.Finish();
}

absl::Status ParseScheduler(const json& v, Config* c) {
  ASSIGN_OR_RETURN(ObjectReader r,
                   ObjectReader::Make(v, "scheduler", &c->no_effect_keys));
  std::string type;
  RETURN_IF_ERROR(r.String("type", &type));
  if (type == "WarmupLR") {
    c->scheduler = SchedulerType::kWarmupLR;
  } else if (type == "WarmupDecayLR") {
    c->scheduler = SchedulerType::kWarmupDecayLR;
  } else if (type == "WarmupCosineLR") {
    c->scheduler = SchedulerType::kWarmupCosineLR;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler.type: expected one of WarmupLR, WarmupDecayLR, "
        "WarmupCosineLR, got \"", type, "\""));
  }
  const json* params = r.Find("params");
  RETURN_IF_ERROR(r.Finish());
  if (!params) return absl::OkStatus();
  ASSIGN_OR_RETURN(ObjectReader pr, ObjectReader::Make(*params, "scheduler.params",
                                                       &c->no_effect_keys));
  RETURN_IF_ERROR(pr.Int("warmup_num_steps", &c->warmup_num_steps, 0, INT64_MAX));
  std::string wt = "log";
  RETURN_IF_ERROR(pr.String("warmup_type", &wt, {"log", "linear"}));
  c->warmup_type = wt == "log" ? WarmupType::kLog : WarmupType::kLinear;
  // The schedule starts at step 0; a checkpoint restores the step count.
  pr.NoEffect("last_batch_iteration", -1);
  if (c->scheduler == SchedulerType::kWarmupCosineLR) {
    RETURN_IF_ERROR(pr.Int("total_num_steps", &c->total_num_steps, 1, INT64_MAX));
    RETURN_IF_ERROR(pr.Num("warmup_min_ratio", &c->warmup_min_ratio, 0.0, 1.0));
    RETURN_IF_ERROR(pr.Num("cos_min_ratio", &c->cos_min_ratio, 0.0, 1.0));
  } else {
    bool min_auto = false, max_auto = false;
    RETURN_IF_ERROR(pr.Num("warmup_min_lr", &c->warmup_min_lr, 0.0, 1e6, &min_auto));
    RETURN_IF_ERROR(pr.Num("warmup_max_lr", &c->warmup_max_lr, 0.0, 1e6, &max_auto));
    if (max_auto) c->warmup_max_lr = c->lr;  // HF: "auto" = the optimizer lr
    if (c->scheduler == SchedulerType::kWarmupDecayLR) {
      bool total_auto = false;
      RETURN_IF_ERROR(pr.Int("total_num_steps", &c->total_num_steps, 1,
                             INT64_MAX, &total_auto));
    }
  }
  if (c->scheduler != SchedulerType::kWarmupLR && c->total_num_steps < 0) {
    return absl::InvalidArgumentError(
        "scheduler.params.total_num_steps: required for this scheduler");
  }
  return pr.Finish();
}

absl::Status ParseFp16(const json& v, Config* c, bool* enabled) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, "fp16", &c->no_effect_keys));
  const json* e = r.Find("enabled");
  if (e && !(e->is_boolean() || r.IsAuto(e))) {
    return r.Bad("enabled", "true or false", *e, true);
  }
  *enabled = e && e->is_boolean() && e->get<bool>();
  // zero does not run the model, so it casts no inputs.
  RETURN_IF_ERROR(r.NoEffectBool("auto_cast", false));
  RETURN_IF_ERROR(r.Num("loss_scale", &c->loss_scale, 0.0, 1e38));
  RETURN_IF_ERROR(r.Int("initial_scale_power", &c->initial_scale_power, 0, 126));
  RETURN_IF_ERROR(r.Int("loss_scale_window", &c->loss_scale_window, 1, INT32_MAX));
  RETURN_IF_ERROR(r.Int("hysteresis", &c->hysteresis, 1, INT32_MAX));
  RETURN_IF_ERROR(r.Bool("consecutive_hysteresis", &c->consecutive_hysteresis));
  RETURN_IF_ERROR(r.Num("min_loss_scale", &c->min_loss_scale, 1e-38, 1e38));
  // Master weights are always fp32.
  r.NoEffect("fp16_master_weights_and_grads", false);
  return r.Finish();
}

absl::Status ParseBf16(const json& v, const std::string& key, bool* enabled,
                       bool* optimizer_states, std::vector<std::string>* no_effect) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, key, no_effect));
  const json* e = r.Find("enabled");
  if (e && !(e->is_boolean() || r.IsAuto(e))) {
    return r.Bad("enabled", "true or false", *e, true);
  }
  *enabled = e && e->is_boolean() && e->get<bool>();
  r.NoEffect("immediate_grad_update");
  // Adam's moments in bf16 (the master stays fp32 here, where DeepSpeed
  // also wants bf16_master_weights_and_grads).
  RETURN_IF_ERROR(r.Bool("bf16_optimizer_states", optimizer_states));
  // A non-finite gradient skips the step in bf16 too: always checked.
  r.NoEffect("check_grad_overflow", true);
  return r.Finish();
}

absl::Status ParseAio(const json& v, AioConfig* a,
                      std::vector<std::string>* no_effect) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, "aio", no_effect));
  RETURN_IF_ERROR(r.Int("block_size", &a->block_size, 4096, INT64_MAX));
  RETURN_IF_ERROR(r.Int("queue_depth", &a->queue_depth, 1, 65536));
  // One IO thread per file set keeps up to queue_depth requests in flight,
  // submitted in batches (core/offload/aio.h), without GPUDirect Storage.
  RETURN_IF_ERROR(r.NoEffectInt("intra_op_parallelism", 1, 1024, 1));
  RETURN_IF_ERROR(r.NoEffectInt("thread_count", 1, 1024, 1));
  RETURN_IF_ERROR(r.NoEffectBool("single_submit", false));
  RETURN_IF_ERROR(r.NoEffectBool("overlap_events", true));
  RETURN_IF_ERROR(r.NoEffectBool("use_gds", false));
  return r.Finish();
}

absl::Status ParseCheckpoint(const json& v, std::vector<std::string>* no_effect) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, "checkpoint", no_effect));
  // zero compares no tags across ranks, which is DeepSpeed's "Ignore".
  std::string tv = "ignore";
  RETURN_IF_ERROR(r.String("tag_validation", &tv, {"warn", "ignore", "fail"}));
  if (tv != "ignore") r.Note("tag_validation");
  // zero reads its own format only (docs/DEEPSPEED_COMPAT.md).
  RETURN_IF_ERROR(r.NoEffectBool("load_universal", false));
  r.NoEffect("use_node_local_storage", false);
  r.NoEffectBlock("parallel_write");
  return r.Finish();
}

// DeepSpeed's comms_logger block (deepspeed/comm/config.py).
absl::Status ParseCommsLogger(const json& v, ObserveConfig* o,
                              std::vector<std::string>* no_effect) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, "comms_logger", no_effect));
  RETURN_IF_ERROR(r.Bool("enabled", &o->comms_logger));
  RETURN_IF_ERROR(r.Bool("verbose", &o->comms_verbose));
  RETURN_IF_ERROR(r.Bool("prof_all", &o->comms_prof_all));
  RETURN_IF_ERROR(r.NoEffectBool("debug", false));
  if (const json* ops = r.Find("prof_ops")) {
    if (!ops->is_array()) {
      return absl::InvalidArgumentError("comms_logger.prof_ops: expected a list of names");
    }
    for (const json& op : *ops) {
      const std::string name = op.is_string() ? op.get<std::string>() : "";
      if (name != "all_reduce" && name != "all_gather" && name != "reduce_scatter" &&
          name != "broadcast" && name != "all_gather_into_tensor" &&
          name != "reduce_scatter_tensor") {
        return absl::InvalidArgumentError(absl::StrCat(
            "comms_logger.prof_ops: expected names among all_reduce, all_gather, "
            "reduce_scatter, broadcast, got ", op.dump()));
      }
      // DeepSpeed's tensor variants are the same collectives here.
      o->comms_prof_ops.push_back(name == "all_gather_into_tensor" ? "all_gather"
                                  : name == "reduce_scatter_tensor" ? "reduce_scatter"
                                                                    : name);
    }
  }
  return r.Finish();
}

// zero's own block: {"path": "trace.json", "start_step": a, "end_step": b}.
absl::Status ParseZeroTrace(const json& v, ObserveConfig* o,
                            std::vector<std::string>* no_effect) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, "zero_trace", no_effect));
  RETURN_IF_ERROR(r.String("path", &o->trace_path));
  RETURN_IF_ERROR(r.Int("start_step", &o->trace_start_step, 0, INT64_MAX));
  RETURN_IF_ERROR(r.Int("end_step", &o->trace_end_step, 1, INT64_MAX));
  if (o->trace_path.empty()) {
    return absl::InvalidArgumentError("zero_trace.path: expected a file path, got none");
  }
  if (o->trace_end_step <= o->trace_start_step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_trace.end_step: expected more than start_step (", o->trace_start_step, "), got ",
        o->trace_end_step));
  }
  return r.Finish();
}

}  // namespace


absl::StatusOr<Config> ParseDsConfig(const std::string& json_text) {
  ASSIGN_OR_RETURN(json root, ParseJson(json_text));
  Config c;
  std::vector<std::string>* no_effect = &c.no_effect_keys;
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(root, "", no_effect));
  bool tb_auto = false, mb_auto = false, gas_auto = false;
  RETURN_IF_ERROR(r.Int("train_batch_size", &c.train_batch_size, 1, INT64_MAX, &tb_auto));
  RETURN_IF_ERROR(r.Int("train_micro_batch_size_per_gpu",
                        &c.train_micro_batch_size_per_gpu, 1, INT64_MAX, &mb_auto));
  RETURN_IF_ERROR(r.Int("gradient_accumulation_steps",
                        &c.gradient_accumulation_steps, 1, INT64_MAX, &gas_auto));
  bool clip_auto = false;
  RETURN_IF_ERROR(r.Num("gradient_clipping", &c.gradient_clipping, 0.0, 1e30, &clip_auto));
  // Gradient averaging around the reduction (Config::prescale_gradients).
  // DeepSpeed reads the predivide factor only when not prescaling.
  RETURN_IF_ERROR(r.Bool("prescale_gradients", &c.prescale_gradients));
  RETURN_IF_ERROR(r.Num("gradient_predivide_factor", &c.gradient_predivide_factor,
                        1e-30, 1e30));
  if (c.prescale_gradients && c.gradient_predivide_factor != 1.0) {
    r.Note("gradient_predivide_factor");
  }
  RETURN_IF_ERROR(r.Int("steps_per_print", &c.steps_per_print, 0, INT32_MAX));
  RETURN_IF_ERROR(r.Num("comm_timeout_seconds", &c.comm_timeout_seconds, 0.001, 1e9));
  RETURN_IF_ERROR(r.Int("zero_flight_recorder_size", &c.flight_recorder_size, 0, 1 << 20));
  RETURN_IF_ERROR(r.Int("zero_ranks_per_node", &c.ranks_per_node, 1, 1 << 20));
  bool allow_untested_keys = true;
  RETURN_IF_ERROR(r.Bool("zero_allow_untested_keys", &allow_untested_keys));
  c.allow_untested_keys = allow_untested_keys;

  bool fp16 = false, bf16 = false, bf16_states = false;
  if (const json* v = r.Find("fp16")) RETURN_IF_ERROR(ParseFp16(*v, &c, &fp16));
  if (const json* v = r.Find("bf16")) RETURN_IF_ERROR(ParseBf16(*v, "bf16", &bf16, &bf16_states, no_effect));
  if (const json* v = r.Find("bfloat16")) {
    bool b = false;
    RETURN_IF_ERROR(ParseBf16(*v, "bfloat16", &b, &bf16_states, no_effect));
    bf16 |= b;
  }
  if (fp16 && bf16) {
    return absl::InvalidArgumentError(
        "fp16.enabled, bf16.enabled: expected at most one enabled, got both");
  }
  c.dtype = fp16 ? DType::kF16 : bf16 ? DType::kBF16 : DType::kF32;

  // Optimizer before scheduler: "auto" scheduler values read the lr.
  if (const json* v = r.Find("optimizer")) RETURN_IF_ERROR(ParseOptimizer(*v, &c));
  if (bf16_states) {
    if (c.moments_format == MomentsFormat::kQ8) {
      return absl::InvalidArgumentError(
          "bf16.bf16_optimizer_states: true contradicts optimizer.moments_format \"8bit\"");
    }
    c.moments_format = MomentsFormat::kBf16;
  }
  if (const json* v = r.Find("scheduler")) RETURN_IF_ERROR(ParseScheduler(*v, &c));
  // Sizes the file does not name are sized from the model at finalize; the
  // zero_optimization block clears these for the keys it sets to numbers.
  c.reduce_bucket_size_auto = true;
  c.stage3_prefetch_bucket_size_auto = true;
  c.stage3_param_persistence_threshold_auto = true;
  if (const json* v = r.Find("zero_optimization")) RETURN_IF_ERROR(ParseZero(*v, &c));
  if (const json* v = r.Find("aio")) RETURN_IF_ERROR(ParseAio(*v, &c.aio, no_effect));
  if (const json* v = r.Find("amp")) {
    if (v->is_object() && v->contains("enabled") && (*v)["enabled"] == true) {
      return absl::InvalidArgumentError("amp.enabled: expected false (NVIDIA apex amp is not supported; use fp16 or bf16), got true");
    }
  }
  if (const json* v = r.Find("checkpoint")) RETURN_IF_ERROR(ParseCheckpoint(*v, no_effect));
  // The dtype of gradient reductions (GradientReducer). Absent or null, as
  // in DeepSpeed: left unset, Config::Resolve takes the working dtype.
  if (const json* v = r.Find("communication_data_type"); v != nullptr && !v->is_null()) {
    std::string t;
    RETURN_IF_ERROR(r.String("communication_data_type", &t, {"fp32", "fp16", "bf16"}));
    t = absl::AsciiStrToLower(t);
    c.communication_data_type = t == "fp16" ? DType::kF16 : t == "bf16" ? DType::kBF16 : DType::kF32;
  }
  // DeepSpeed switches and blocks for features outside model-state
  // management (monitoring, profiling, model code, data loading, other
  // parallelisms): accepted so a ds_config.json loads as-is, reported.
  RETURN_IF_ERROR(r.Bool("wall_clock_breakdown", &c.observe.wall_clock_breakdown));
  if (const json* v = r.Find("comms_logger")) {
    RETURN_IF_ERROR(ParseCommsLogger(*v, &c.observe, no_effect));
  }
  if (const json* v = r.Find("zero_trace")) RETURN_IF_ERROR(ParseZeroTrace(*v, &c.observe, no_effect));
  for (const char* k : {"memory_breakdown",
                        "dump_state", "sparse_gradients",
                        "zero_allow_untested_optimizer", "disable_allgather",
                        "dataloader_drop_last", "graph_harvesting",
                        "use_data_before_expert_parallelism"}) {
    r.NoEffect(k, false);
  }
  // zero always runs its own CPU optimizer on offloaded state.
  r.NoEffect("zero_force_ds_cpu_optimizer", true);
  r.NoEffect("seq_parallel_communication_data_type");
  for (const char* k :
       {"tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler",
        "activation_checkpointing", "elasticity",
        "autotuning", "data_efficiency", "compression_training",
        "sparse_attention", "pipeline", "data_types", "timers", "nebula",
        "eigenvalue", "progressive_layer_drop", "curriculum_learning",
        "quantize_training", "compile", "hybrid_engine", "torch_autocast",
        "weight_quantization"}) {
    r.NoEffectBlock(k);
  }
  RETURN_IF_ERROR(r.Finish());
  if (!allow_untested_keys && !c.no_effect_keys.empty()) {
    const std::vector<std::string>& k = c.no_effect_keys;
    return absl::InvalidArgumentError(absl::StrCat(
        k[0], ": accepted without effect in zero, and \"zero_allow_untested_keys\""
        " is false (remove the key, or see docs/DEEPSPEED_COMPAT.md)",
        k.size() > 1 ? absl::StrCat("; also: ",
                                    absl::StrJoin(k.begin() + 1, k.end(), ", "))
                     : ""));
  }
  return c;
}

absl::StatusOr<Config> ParseDsConfigKeysRead(const std::string& json_text,
                                             std::set<std::string>* keys_read) {
  config_internal::KeysRead() = keys_read;
  absl::StatusOr<Config> c = ParseDsConfig(json_text);
  config_internal::KeysRead() = nullptr;
  return c;
}

std::string NoEffectReport(const Config& c) {
  if (c.no_effect_keys.empty()) return "";
  return absl::StrCat(
      "[zero] accepted without effect: ", absl::StrJoin(c.no_effect_keys, ", "),
      " (set \"zero_allow_untested_keys\": false to make these errors)");
}

}  // namespace zero
