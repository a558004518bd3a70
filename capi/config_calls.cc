// The C ABI's calls that take a config: an engine from a zero_config or a
// ds_config JSON text (the memory estimate of a ds_config: estimate_calls.cc).
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "capi/abi_struct.h"
#include "capi/call_support.h"
#include "core/backend/device_factory.h"
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "zero_c.h"

namespace {

using zero_capi::BadStruct;
using zero_capi::EnumValue;
using zero_capi::Guard;
using zero_capi::ReadStruct;
using zero_capi::Report;
using zero_capi::ToDType;
using zero_capi::ValidDType;

constexpr zero_config kConfigDefaults = ZERO_CONFIG_INIT;

// zero_config (C) -> zero::Config (C++). Negative means "DeepSpeed default";
// fields past an older caller's struct_size are ZERO_CONFIG_INIT's, which
// are all "default".
absl::StatusOr<zero::Config> FromC(const zero_config* in) {
  auto read = ReadStruct(in, kConfigDefaults);
  if (!read.ok()) return read.status();
  const zero_config* c = &*read;
  zero::Config k;
  k.stage = c->stage;
  const int64_t dtype = EnumValue(c->dtype);
  if (!ValidDType(dtype)) return absl::InvalidArgumentError(absl::StrCat("zero_config.dtype: expected 0..2, got ", dtype));
  k.dtype = ToDType(dtype);
  const int64_t optimizer = EnumValue(c->optimizer);
  switch (optimizer) {
    case ZERO_OPTIMIZER_ADAM: k.optimizer = zero::OptimizerType::kAdam; break;
    case ZERO_OPTIMIZER_ADAMW: k.optimizer = zero::OptimizerType::kAdamW; break;
    case ZERO_OPTIMIZER_SGD: k.optimizer = zero::OptimizerType::kSgd; break;
    case ZERO_OPTIMIZER_LION: k.optimizer = zero::OptimizerType::kLion; break;
    case ZERO_OPTIMIZER_ADAGRAD:
      // DeepSpeedCPUAdagrad's defaults, as ds_config's "Adagrad".
      k.optimizer = zero::OptimizerType::kAdagrad;
      k.lr = 1e-2;
      k.eps = 1e-10;
      break;
    case ZERO_OPTIMIZER_MUON: k.optimizer = zero::OptimizerType::kMuon; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("zero_config.optimizer: expected 0..5, got ", optimizer));
  }
  auto f = [](float v, double* out) { if (v >= 0.0f) *out = v; };
  auto i64 = [](int64_t v, int64_t* out) { if (v >= 0) *out = v; };
  f(c->lr, &k.lr);
  f(c->beta1, &k.beta1);
  f(c->beta2, &k.beta2);
  f(c->eps, &k.eps);
  f(c->weight_decay, &k.weight_decay);
  f(c->momentum, k.optimizer == zero::OptimizerType::kMuon ? &k.muon_momentum : &k.momentum);
  if (c->gradient_accumulation_steps >= 0) {
    if (c->gradient_accumulation_steps == 0) return absl::InvalidArgumentError("zero_config.gradient_accumulation_steps: expected >= 1, got 0");
    k.gradient_accumulation_steps = c->gradient_accumulation_steps;
  }
  f(c->gradient_clipping, &k.gradient_clipping);
  // Left at -1: sized from the model at finalize, as a ds_config without
  // the key (docs/DEEPSPEED_COMPAT.md).
  i64(c->reduce_bucket_size, &k.reduce_bucket_size);
  k.reduce_bucket_size_auto = c->reduce_bucket_size < 0;
  k.stage3_prefetch_bucket_size_auto = c->stage3_prefetch_bucket_size < 0;
  k.stage3_param_persistence_threshold_auto = c->stage3_param_persistence_threshold < 0;
  i64(c->allgather_bucket_size, &k.allgather_bucket_size);
  if (c->overlap_comm >= 0) k.overlap_comm = c->overlap_comm ? 1 : 0;
  i64(c->sub_group_size, &k.sub_group_size);
  i64(c->stage3_max_live_parameters, &k.stage3_max_live_parameters);
  i64(c->stage3_prefetch_bucket_size, &k.stage3_prefetch_bucket_size);
  i64(c->stage3_param_persistence_threshold, &k.stage3_param_persistence_threshold);
  f(c->loss_scale, &k.loss_scale);
  if (c->initial_scale_power >= 0) k.initial_scale_power = c->initial_scale_power;
  if (c->loss_scale_window >= 0) k.loss_scale_window = c->loss_scale_window;
  if (c->hysteresis >= 0) k.hysteresis = c->hysteresis;
  f(c->min_loss_scale, &k.min_loss_scale);
  if (c->steps_per_print >= 0) k.steps_per_print = c->steps_per_print;
  if (c->comm_timeout_seconds > 0) k.comm_timeout_seconds = c->comm_timeout_seconds;
  if (k.sub_group_size < 1 || k.reduce_bucket_size < 1) {
    return absl::InvalidArgumentError("zero_config.reduce_bucket_size / sub_group_size: expected >= 1");
  }
  if (k.loss_scale_window < 1 || k.hysteresis < 1) {
    return absl::InvalidArgumentError("zero_config.loss_scale_window / hysteresis: expected >= 1");
  }
  return k;
}

zero_status MakeEngine(const zero::Config& config, zero_comm_t* comm,
                       zero_engine_t** out) {
  auto e = zero::Engine::Create(config, comm->comm.get());
  if (!e.ok()) return Report(e.status());
  if (comm->comm->device_memory()) {  // NCCL: state lives on its GPU
    auto d = zero::MakeDevice("cuda", comm->comm->device_ordinal());
    if (!d.ok()) return Report(d.status());
    absl::Status s = (*e)->SetDevice(std::move(*d));
    if (!s.ok()) return Report(s);
  }
  *out = new zero_engine_t{std::move(*e)};
  return Report(absl::OkStatus());
}

}  // namespace

extern "C" {

zero_status zero_engine_create(const zero_config* config, zero_comm_t* comm,
                               zero_engine_t** out) {
  ZERO_CHECK_ARG("zero_engine_create", config);
  ZERO_CHECK_ARG("zero_engine_create", comm);
  ZERO_CHECK_ARG("zero_engine_create", out);
  *out = nullptr;
  return Guard([&] {
    auto k = FromC(config);
    if (!k.ok()) return Report(k.status());
    return MakeEngine(*k, comm, out);
  });
}

zero_status zero_engine_create_json(const char* json_text, zero_comm_t* comm,
                                    zero_engine_t** out) {
  ZERO_CHECK_ARG("zero_engine_create_json", json_text);
  ZERO_CHECK_ARG("zero_engine_create_json", comm);
  ZERO_CHECK_ARG("zero_engine_create_json", out);
  *out = nullptr;
  return Guard([&] {
    auto k = zero::ParseDsConfig(json_text);
    if (!k.ok()) return Report(k.status());
    return MakeEngine(*k, comm, out);
  });
}

}  // extern "C"
