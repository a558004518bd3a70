// The C ABI's memory estimates (docs/ARCHITECTURE.md, "Memory estimator"):
// of counted params (1.5), and of params described as an engine is given
// them (1.16), read by registration's own checks and decisions.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/abi_struct.h"
#include "capi/call_support.h"
#include "capi/param_desc.h"
#include "core/config/config.h"
#include "core/engine/param_registry.h"
#include "core/estimate/memory_estimate.h"
#include "core/estimate/registry_estimate.h"
#include "zero_c.h"

namespace {

using zero_capi::BadStruct;
using zero_capi::CheckStructSize;
using zero_capi::Guard;
using zero_capi::ReadParamDesc;
using zero_capi::Report;
using zero_capi::WriteStruct;
using zero_capi::ZeroStruct;

// The estimate of `params` into the caller's struct (whose size was checked).
zero_status Estimate(const std::vector<zero::EstimateParam>& params, const zero::Config& config,
                     int32_t ranks_per_node, int32_t nodes, int32_t gpu,
                     zero_memory_estimate* out) {
  auto e = zero::EstimateMemory(params, config, {ranks_per_node, nodes, gpu != 0});
  if (!e.ok()) return Report(e.status());
  zero_memory_estimate o = ZeroStruct<zero_memory_estimate>();
  o.trainable_numel = e->trainable_numel;
  o.padded_numel = e->padded_numel;
  o.param_bytes = e->param_bytes;
  o.grad_bytes = e->grad_bytes;
  o.master_bytes = e->master_bytes;
  o.optimizer_bytes = e->optimizer_bytes;
  o.frozen_bytes = e->frozen_bytes;
  o.buffer_bytes = e->buffer_bytes;
  o.nvme_bytes = e->nvme_bytes;
  o.live_peak_bytes = e->live_peak_bytes;
  o.device_bytes = e->device_bytes;
  o.device_peak_bytes = e->device_peak_bytes;
  o.host_bytes = e->host_bytes;
  o.host_bytes_per_node = e->host_bytes_per_node;
  WriteStruct(o, out);
  return Report(absl::OkStatus());
}

}  // namespace

extern "C" {

zero_status zero_estimate_memory(const char* json_text, int32_t num_params, const int64_t* numel,
                                 const int32_t* ndim, int32_t ranks_per_node, int32_t nodes,
                                 int32_t gpu, zero_memory_estimate* out) {
  ZERO_CHECK_ARG("zero_estimate_memory", json_text);
  ZERO_CHECK_ARG("zero_estimate_memory", out);
  if (num_params < 0 || (num_params > 0 && (numel == nullptr || ndim == nullptr))) {
    return Report(absl::InvalidArgumentError(
        "zero_estimate_memory: numel or ndim is null, or num_params is negative"));
  }
  absl::Status size_ok = CheckStructSize(out);
  if (!size_ok.ok()) return BadStruct("zero_estimate_memory", size_ok);
  return Guard([&] {
    auto cfg = zero::ParseDsConfig(json_text);
    if (!cfg.ok()) return Report(cfg.status());
    std::vector<zero::EstimateParam> ps(num_params);
    for (int32_t i = 0; i < num_params; ++i) {
      ps[i].numel = numel[i];
      ps[i].ndim = ndim[i];
    }
    return Estimate(ps, *cfg, ranks_per_node, nodes, gpu, out);
  });
}

zero_status zero_estimate_memory_params(const char* json_text, int32_t num_params,
                                        const zero_param_desc* params, int32_t ranks_per_node,
                                        int32_t nodes, int32_t gpu, zero_memory_estimate* out) {
  const char* call = "zero_estimate_memory_params";
  ZERO_CHECK_ARG(call, json_text);
  ZERO_CHECK_ARG(call, out);
  if (num_params < 0 || (num_params > 0 && params == nullptr)) {
    return Report(absl::InvalidArgumentError(absl::StrCat(
        call, ": params is NULL or num_params is negative (num_params ", num_params, ")")));
  }
  absl::Status size_ok = CheckStructSize(out);
  if (!size_ok.ok()) return BadStruct(call, size_ok);
  return Guard([&] {
    auto cfg = zero::ParseDsConfig(json_text);
    if (!cfg.ok()) return Report(cfg.status());
    // Registration's checks and decisions (frozen, Muon's half) on a
    // registry of the config's working dtype, as Engine::RegisterParam.
    zero::ParamRegistry registry(cfg->dtype);
    for (int32_t i = 0; i < num_params; ++i) {
      const std::string entry = absl::StrCat(call, ", param ", i);
      zero::ParamSpec spec;
      const zero_status read = ReadParamDesc(entry.c_str(), &params[i], &spec);
      if (read != ZERO_OK) return read;
      spec.init = nullptr;  // values are not estimated
      // The engine holds trainable params in the working dtype (registration
      // refuses another); an estimate takes them so, whatever the caller's
      // tensors are in before zero.
      if (spec.trainable) spec.dtype = cfg->dtype;
      auto id = registry.Register(spec);
      if (!id.ok()) {
        return Report(absl::Status(id.status().code(),
                                   absl::StrCat(entry, ": ", id.status().message())));
      }
    }
    return Estimate(zero::EstimateParamsOf(registry), *cfg, ranks_per_node, nodes, gpu, out);
  });
}

}  // extern "C"
