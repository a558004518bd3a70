#include "core/config/config.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"

namespace zero {
namespace {

using json = nlohmann::json;

std::string Show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Reads the keys of one JSON object, remembering which were consumed so that
// Finish() can reject the rest (typos are errors, not silently ignored).
class ObjectReader {
 public:
  ObjectReader(const json& obj, std::string path)
      : obj_(obj), path_(std::move(path)) {}

  static absl::StatusOr<ObjectReader> Make(const json& v, std::string path) {
    if (!v.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path.empty() ? "config" : path,
                       ": expected an object, got ", Show(v)));
    }
    return ObjectReader(v, std::move(path));
  }

  std::string Path(const std::string& key) const {
    return path_.empty() ? key : absl::StrCat(path_, ".", key);
  }

  const json* Find(const std::string& key) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool IsAuto(const json* v) const {
    return v && v->is_string() && v->get<std::string>() == "auto";
  }

  // Integers may arrive as JSON floats with integral values (5e8).
  absl::Status Int(const std::string& key, int64_t* out, int64_t lo,
                   int64_t hi, bool* is_auto = nullptr) {
    const json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (IsAuto(v) && is_auto) {
      *is_auto = true;
      return absl::OkStatus();
    }
    double d;
    if (v->is_number_integer()) {
      d = static_cast<double>(v->get<int64_t>());
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) {
      d = v->get<double>();
    } else {
      return Bad(key, RangeText(lo, hi), *v, is_auto != nullptr);
    }
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
      return Bad(key, RangeText(lo, hi), *v, false);
    }
    *out = static_cast<int64_t>(d);
    return absl::OkStatus();
  }

  absl::Status Int(const std::string& key, int* out, int64_t lo, int64_t hi) {
    int64_t x = *out;
    RETURN_IF_ERROR(Int(key, &x, lo, hi));
    *out = static_cast<int>(x);
    return absl::OkStatus();
  }

  absl::Status Num(const std::string& key, double* out, double lo, double hi,
                   bool* is_auto = nullptr) {
    const json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (IsAuto(v) && is_auto) {
      *is_auto = true;
      return absl::OkStatus();
    }
    if (!v->is_number() || !(v->get<double>() >= lo && v->get<double>() <= hi)) {
      return Bad(key, absl::StrCat("a number in [", lo, ", ", hi, "]"), *v,
                 is_auto != nullptr);
    }
    *out = v->get<double>();
    return absl::OkStatus();
  }

  absl::Status Bool(const std::string& key, bool* out) {
    const json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (!v->is_boolean()) return Bad(key, "true or false", *v, false);
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  absl::Status String(const std::string& key, std::string* out,
                      const std::vector<std::string>& allowed = {}) {
    const json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (!v->is_string()) return Bad(key, "a string", *v, false);
    std::string s = v->get<std::string>();
    if (!allowed.empty()) {
      bool ok = false;
      for (const auto& a : allowed) ok |= absl::AsciiStrToLower(s) == a;
      if (!ok) {
        return Bad(key, absl::StrCat("one of ", absl::StrJoin(allowed, ", ")),
                   *v, false);
      }
      s = absl::AsciiStrToLower(s);
    }
    *out = s;
    return absl::OkStatus();
  }

  // Keys accepted for DeepSpeed compatibility that change nothing here.
  void Ignore(const std::vector<std::string>& keys) {
    for (const auto& k : keys) seen_.insert(k);
  }

  absl::Status Finish() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (!seen_.count(it.key())) {
        return absl::InvalidArgumentError(
            absl::StrCat(Path(it.key()), ": unknown key"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Bad(const std::string& key, const std::string& expected,
                   const json& got, bool auto_ok) const {
    return absl::InvalidArgumentError(
        absl::StrCat(Path(key), ": expected ", expected,
                     auto_ok ? " or \"auto\"" : "", ", got ", Show(got)));
  }

 private:
  static std::string RangeText(int64_t lo, int64_t hi) {
    if (hi == INT64_MAX) return absl::StrCat("an integer >= ", lo);
    return absl::StrCat(lo, "..", hi);
  }

  const json& obj_;
  std::string path_;
  std::set<std::string> seen_;
};

absl::Status ParseOffload(const json& v, const std::string& path,
                          OffloadConfig* o, bool is_param) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, path));
  std::string device = OffloadDeviceName(o->device);
  RETURN_IF_ERROR(r.String("device", &device, {"none", "cpu", "nvme"}));
  o->device = device == "cpu"    ? OffloadDevice::kCpu
              : device == "nvme" ? OffloadDevice::kNvme
                                 : OffloadDevice::kNone;
  RETURN_IF_ERROR(r.String("nvme_path", &o->nvme_path));
  RETURN_IF_ERROR(r.Int("buffer_count", &o->buffer_count, 1, 1024));
  RETURN_IF_ERROR(r.Bool("pin_memory", &o->pin_memory));
  if (is_param) {
    RETURN_IF_ERROR(r.Int("buffer_size", &o->buffer_size, 1, INT64_MAX));
    RETURN_IF_ERROR(r.Int("max_in_cpu", &o->max_in_cpu, 0, INT64_MAX));
  } else {
    RETURN_IF_ERROR(r.Bool("pipeline_read", &o->pipeline_read));
    RETURN_IF_ERROR(r.Bool("pipeline_write", &o->pipeline_write));
    RETURN_IF_ERROR(r.Bool("fast_init", &o->fast_init));
    RETURN_IF_ERROR(r.Num("ratio", &o->ratio, 0.0, 1.0));
    r.Ignore({"pipeline"});
  }
  if (o->device == OffloadDevice::kNvme && o->nvme_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".nvme_path: required when device is \"nvme\""));
  }
  return r.Finish();
}

absl::Status ParseZero(const json& v, Config* c) {
  const std::string p = "zero_optimization";
  if (v.is_boolean()) {  // deprecated: true means stage 1
    c->stage = v.get<bool>() ? 1 : 0;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, p));
  int64_t stage = c->stage;
  RETURN_IF_ERROR(r.Int("stage", &stage, 0, 3));
  c->stage = static_cast<int>(stage);
  RETURN_IF_ERROR(r.Bool("contiguous_gradients", &c->contiguous_gradients));
  RETURN_IF_ERROR(r.Bool("reduce_scatter", &c->reduce_scatter));
  RETURN_IF_ERROR(r.Bool("allgather_partitions", &c->allgather_partitions));
  RETURN_IF_ERROR(r.Int("reduce_bucket_size", &c->reduce_bucket_size, 1,
                        INT64_MAX, &c->reduce_bucket_size_auto));
  RETURN_IF_ERROR(
      r.Int("allgather_bucket_size", &c->allgather_bucket_size, 1, INT64_MAX));
  if (const json* o = r.Find("overlap_comm")) {
    if (!o->is_boolean()) return r.Bad("overlap_comm", "true or false", *o, false);
    c->overlap_comm = o->get<bool>() ? 1 : 0;
  }
  RETURN_IF_ERROR(r.Bool("load_from_fp32_weights", &c->load_from_fp32_weights));
  RETURN_IF_ERROR(r.Int("sub_group_size", &c->sub_group_size, 1, INT64_MAX));
  RETURN_IF_ERROR(r.Bool("round_robin_gradients", &c->round_robin_gradients));
  RETURN_IF_ERROR(
      r.Bool("ignore_unused_parameters", &c->ignore_unused_parameters));
  RETURN_IF_ERROR(r.Int("stage3_prefetch_bucket_size",
                        &c->stage3_prefetch_bucket_size, 0, INT64_MAX,
                        &c->stage3_prefetch_bucket_size_auto));
  RETURN_IF_ERROR(r.Int("stage3_param_persistence_threshold",
                        &c->stage3_param_persistence_threshold, 0, INT64_MAX,
                        &c->stage3_param_persistence_threshold_auto));
  RETURN_IF_ERROR(r.Int("stage3_max_live_parameters",
                        &c->stage3_max_live_parameters, 0, INT64_MAX));
  RETURN_IF_ERROR(r.Int("stage3_max_reuse_distance",
                        &c->stage3_max_reuse_distance, 0, INT64_MAX));
  RETURN_IF_ERROR(r.Bool("stage3_gather_16bit_weights_on_model_save",
                         &c->stage3_gather_16bit_weights_on_model_save));
  // DeepSpeed's older alias of the key above.
  RETURN_IF_ERROR(r.Bool("stage3_gather_fp16_weights_on_model_save",
                         &c->stage3_gather_16bit_weights_on_model_save));
  if (const json* o = r.Find("offload_optimizer")) {
    RETURN_IF_ERROR(ParseOffload(*o, p + ".offload_optimizer",
                                 &c->offload_optimizer, false));
  }
  if (const json* o = r.Find("offload_param")) {
    RETURN_IF_ERROR(
        ParseOffload(*o, p + ".offload_param", &c->offload_param, true));
  }
  bool cpu_offload = false, cpu_offload_param = false;
  RETURN_IF_ERROR(r.Bool("cpu_offload", &cpu_offload));
  RETURN_IF_ERROR(r.Bool("cpu_offload_param", &cpu_offload_param));
  if (cpu_offload) c->offload_optimizer.device = OffloadDevice::kCpu;
  if (cpu_offload_param) c->offload_param.device = OffloadDevice::kCpu;
  int64_t hpz = 1, mics = -1;
  RETURN_IF_ERROR(r.Int("zero_hpz_partition_size", &hpz, 1, 1));
  RETURN_IF_ERROR(r.Int("mics_shard_size", &mics, -1, -1));
  // Accepted DeepSpeed tuning knobs that have no effect in zero.
  r.Ignore({"elastic_checkpoint", "stage3_max_reuse_distance",
            "memory_efficient_linear", "zero_quantized_weights",
            "zero_quantized_gradients", "zero_quantized_nontrainable_weights",
            "mics_hierarchical_params_gather", "pipeline_loading_checkpoint",
            "override_module_apply", "use_all_reduce_for_fetch_params",
            "legacy_stage1", "log_trace_cache_warnings"});
  return r.Finish();
}

absl::Status ParseOptimizer(const json& v, Config* c) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, "optimizer"));
  std::string type = "adamw";
  RETURN_IF_ERROR(r.String("type", &type));
  std::string t = absl::AsciiStrToLower(type);
  if (t == "adam") {
    c->optimizer = OptimizerType::kAdam;
  } else if (t == "adamw") {
    c->optimizer = OptimizerType::kAdamW;
  } else if (t == "sgd") {
    c->optimizer = OptimizerType::kSgd;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.type: expected one of Adam, AdamW, SGD, got \"", type,
        "\"", (t == "lion" || t == "adagrad" || t == "lamb" || t == "onebitadam")
                  ? " (a DeepSpeed optimizer zero does not implement)"
                  : ""));
  }
  const json* params = r.Find("params");
  RETURN_IF_ERROR(r.Finish());
  if (!params) return absl::OkStatus();
  ASSIGN_OR_RETURN(ObjectReader pr, ObjectReader::Make(*params, "optimizer.params"));
  RETURN_IF_ERROR(pr.Num("lr", &c->lr, 0.0, 1e6));
  RETURN_IF_ERROR(pr.Num("weight_decay", &c->weight_decay, 0.0, 1e6));
  if (c->optimizer == OptimizerType::kSgd) {
    RETURN_IF_ERROR(pr.Num("momentum", &c->momentum, 0.0, 1.0));
    RETURN_IF_ERROR(pr.Num("dampening", &c->dampening, 0.0, 1.0));
    RETURN_IF_ERROR(pr.Bool("nesterov", &c->nesterov));
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
  RETURN_IF_ERROR(pr.Num("eps", &c->eps, 0.0, 1.0));
  RETURN_IF_ERROR(pr.Bool("adam_w_mode", &c->adam_w_mode));
  bool torch_adam = false, amsgrad = false, bias_correction = true;
  RETURN_IF_ERROR(pr.Bool("torch_adam", &torch_adam));
  RETURN_IF_ERROR(pr.Bool("amsgrad", &amsgrad));
  RETURN_IF_ERROR(pr.Bool("bias_correction", &bias_correction));
  if (amsgrad) return absl::InvalidArgumentError("optimizer.params.amsgrad: expected false (not implemented), got true");
  if (!bias_correction) return absl::InvalidArgumentError("optimizer.params.bias_correction: expected true (not implemented), got false");
  pr.Ignore({"fused", "foreach", "capturable", "maximize"});
  return pr.Finish();
}

absl::Status ParseScheduler(const json& v, Config* c) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, "scheduler"));
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
  ASSIGN_OR_RETURN(ObjectReader pr, ObjectReader::Make(*params, "scheduler.params"));
  RETURN_IF_ERROR(pr.Int("warmup_num_steps", &c->warmup_num_steps, 0, INT64_MAX));
  std::string wt = "log";
  RETURN_IF_ERROR(pr.String("warmup_type", &wt, {"log", "linear"}));
  c->warmup_type = wt == "log" ? WarmupType::kLog : WarmupType::kLinear;
  pr.Ignore({"last_batch_iteration"});
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
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, "fp16"));
  const json* e = r.Find("enabled");
  if (e && !(e->is_boolean() || r.IsAuto(e))) {
    return r.Bad("enabled", "true or false", *e, true);
  }
  *enabled = e && e->is_boolean() && e->get<bool>();
  bool auto_cast = false;
  RETURN_IF_ERROR(r.Bool("auto_cast", &auto_cast));
  RETURN_IF_ERROR(r.Num("loss_scale", &c->loss_scale, 0.0, 1e38));
  RETURN_IF_ERROR(r.Int("initial_scale_power", &c->initial_scale_power, 0, 126));
  RETURN_IF_ERROR(r.Int("loss_scale_window", &c->loss_scale_window, 1, INT32_MAX));
  RETURN_IF_ERROR(r.Int("hysteresis", &c->hysteresis, 1, INT32_MAX));
  RETURN_IF_ERROR(r.Bool("consecutive_hysteresis", &c->consecutive_hysteresis));
  RETURN_IF_ERROR(r.Num("min_loss_scale", &c->min_loss_scale, 1e-38, 1e38));
  r.Ignore({"fp16_master_weights_and_grads"});
  return r.Finish();
}

absl::Status ParseBf16(const json& v, const std::string& key, bool* enabled) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, key));
  const json* e = r.Find("enabled");
  if (e && !(e->is_boolean() || r.IsAuto(e))) {
    return r.Bad("enabled", "true or false", *e, true);
  }
  *enabled = e && e->is_boolean() && e->get<bool>();
  r.Ignore({"immediate_grad_update", "check_grad_overflow"});
  return r.Finish();
}

absl::Status ParseAio(const json& v, AioConfig* a) {
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(v, "aio"));
  RETURN_IF_ERROR(r.Int("block_size", &a->block_size, 4096, INT64_MAX));
  RETURN_IF_ERROR(r.Int("queue_depth", &a->queue_depth, 1, 65536));
  RETURN_IF_ERROR(r.Int("intra_op_parallelism", &a->intra_op_parallelism, 1, 1024));
  RETURN_IF_ERROR(r.Int("thread_count", &a->intra_op_parallelism, 1, 1024));
  RETURN_IF_ERROR(r.Bool("single_submit", &a->single_submit));
  RETURN_IF_ERROR(r.Bool("overlap_events", &a->overlap_events));
  RETURN_IF_ERROR(r.Bool("use_gds", &a->use_gds));
  return r.Finish();
}

}  // namespace

absl::StatusOr<Config> ParseDsConfig(const std::string& json_text) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false,
                          /*ignore_comments=*/true);
  if (root.is_discarded()) {
    // Re-parse with exceptions only to get the position of the error.
    try {
      (void)json::parse(json_text, nullptr, true, true);
    } catch (const json::parse_error& e) {
      return absl::InvalidArgumentError(absl::StrCat("config: invalid JSON: ", e.what()));
    }
    return absl::InvalidArgumentError("config: invalid JSON");
  }
  Config c;
  ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(root, ""));
  bool tb_auto = false, mb_auto = false, gas_auto = false;
  RETURN_IF_ERROR(r.Int("train_batch_size", &c.train_batch_size, 1, INT64_MAX, &tb_auto));
  RETURN_IF_ERROR(r.Int("train_micro_batch_size_per_gpu",
                        &c.train_micro_batch_size_per_gpu, 1, INT64_MAX, &mb_auto));
  RETURN_IF_ERROR(r.Int("gradient_accumulation_steps",
                        &c.gradient_accumulation_steps, 1, INT64_MAX, &gas_auto));
  bool clip_auto = false;
  RETURN_IF_ERROR(r.Num("gradient_clipping", &c.gradient_clipping, 0.0, 1e30, &clip_auto));
  RETURN_IF_ERROR(r.Bool("prescale_gradients", &c.prescale_gradients));
  RETURN_IF_ERROR(r.Num("gradient_predivide_factor", &c.gradient_predivide_factor, 1e-30, 1e30));
  RETURN_IF_ERROR(r.Int("steps_per_print", &c.steps_per_print, 0, INT32_MAX));
  RETURN_IF_ERROR(r.Num("comm_timeout_seconds", &c.comm_timeout_seconds, 0.001, 1e9));

  bool fp16 = false, bf16 = false;
  if (const json* v = r.Find("fp16")) RETURN_IF_ERROR(ParseFp16(*v, &c, &fp16));
  if (const json* v = r.Find("bf16")) RETURN_IF_ERROR(ParseBf16(*v, "bf16", &bf16));
  if (const json* v = r.Find("bfloat16")) {
    bool b = false;
    RETURN_IF_ERROR(ParseBf16(*v, "bfloat16", &b));
    bf16 |= b;
  }
  if (fp16 && bf16) {
    return absl::InvalidArgumentError(
        "fp16.enabled, bf16.enabled: expected at most one enabled, got both");
  }
  c.dtype = fp16 ? DType::kF16 : bf16 ? DType::kBF16 : DType::kF32;

  // Optimizer before scheduler: "auto" scheduler values read the lr.
  if (const json* v = r.Find("optimizer")) RETURN_IF_ERROR(ParseOptimizer(*v, &c));
  if (const json* v = r.Find("scheduler")) RETURN_IF_ERROR(ParseScheduler(*v, &c));
  if (const json* v = r.Find("zero_optimization")) RETURN_IF_ERROR(ParseZero(*v, &c));
  if (const json* v = r.Find("aio")) RETURN_IF_ERROR(ParseAio(*v, &c.aio));
  if (const json* v = r.Find("amp")) {
    if (v->is_object() && v->contains("enabled") && (*v)["enabled"] == true) {
      return absl::InvalidArgumentError("amp.enabled: expected false (NVIDIA apex amp is not supported; use fp16 or bf16), got true");
    }
  }
  if (const json* v = r.Find("checkpoint")) {
    ASSIGN_OR_RETURN(ObjectReader cr, ObjectReader::Make(*v, "checkpoint"));
    std::string tv;
    RETURN_IF_ERROR(cr.String("tag_validation", &tv, {"warn", "ignore", "fail"}));
    bool universal = false;
    RETURN_IF_ERROR(cr.Bool("load_universal", &universal));
    cr.Ignore({"use_node_local_storage", "parallel_write"});
    RETURN_IF_ERROR(cr.Finish());
  }
  // DeepSpeed blocks for monitoring, profiling and features outside model
  // state management: accepted so a ds_config.json loads as-is, no effect.
  r.Ignore({"wall_clock_breakdown", "memory_breakdown", "dump_state",
            "tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler",
            "activation_checkpointing", "comms_logger", "elasticity",
            "autotuning", "data_efficiency", "compression_training",
            "sparse_attention", "sparse_gradients", "communication_data_type",
            "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
            "pipeline", "data_types", "timers", "nebula", "eigenvalue",
            "progressive_layer_drop", "curriculum_learning",
            "quantize_training", "disable_allgather", "dataloader_drop_last",
            "graph_harvesting", "compile", "hybrid_engine", "torch_autocast",
            "seq_parallel_communication_data_type", "weight_quantization",
            "use_data_before_expert_parallelism"});
  RETURN_IF_ERROR(r.Finish());
  return c;
}

const char* OffloadDeviceName(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kCpu: return "cpu";
    case OffloadDevice::kNvme: return "nvme";
    case OffloadDevice::kNone: break;
  }
  return "none";
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
  // Batch arithmetic: train = micro * gas * world; any two give the third.
  int64_t& tb = train_batch_size;
  int64_t& mb = train_micro_batch_size_per_gpu;
  int64_t& gas = gradient_accumulation_steps;
  const int64_t w = world_size;
  if (tb > 0 && mb > 0 && gas > 0) {
    if (tb != mb * gas * w) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train_batch_size: expected train_micro_batch_size_per_gpu * "
          "gradient_accumulation_steps * world_size = ", mb, " * ", gas,
          " * ", w, " = ", mb * gas * w, ", got ", tb));
    }
  } else if (tb > 0 && mb > 0) {
    if (tb % (mb * w) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train_batch_size: expected a multiple of micro batch * world size (",
          mb * w, "), got ", tb));
    }
    gas = tb / (mb * w);
  } else if (tb > 0 && gas > 0) {
    if (tb % (gas * w) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train_batch_size: expected a multiple of gradient_accumulation_steps"
          " * world size (", gas * w, "), got ", tb));
    }
    mb = tb / (gas * w);
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
    tb = mb * gas * w;
  }
  if (dtype != DType::kF16) loss_scale = 1.0;  // no scaling outside fp16
  if (scheduler == SchedulerType::kWarmupCosineLR && total_num_steps < 1) {
    return absl::InvalidArgumentError(
        "scheduler.params.total_num_steps: required for WarmupCosineLR");
  }
  return absl::OkStatus();
}

}  // namespace zero
