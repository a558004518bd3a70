// zero-estimate: memory per rank before launching (core/estimate).
//
//   zero-estimate --params 13e9 [--hidden 5120] [--ranks-per-node 8] [--nodes 1]
//   zero-estimate --safetensors model.safetensors|model.safetensors.index.json
//   options: --config ds_config.json (stage, precision, offload, bucket sizes)
//            --stage N (only this stage), --dtype fp32|fp16|bf16, --cpu (CPU device)
//            --deepspeed (also DeepSpeed's own estimate table)
//            --detail (every category for each row)
//
// Prints, for each stage and offload choice, the bytes per rank in device
// memory (steady and with stage 3's live gathered params) and host memory per
// node, then DeepSpeed's estimate_zero2/zero3 rows for the same count.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/ckpt/safetensors_reader.h"
#include "core/config/config.h"
#include "core/engine/offload_placement.h"
#include "core/engine/param_registry.h"
#include "core/estimate/memory_estimate.h"

namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "zero-estimate: %s\n"
               "usage: zero-estimate (--params N [--hidden H] | --safetensors PATH)\n"
               "         [--ranks-per-node G] [--nodes N] [--config ds_config.json]\n"
               "         [--stage S] [--dtype fp32|fp16|bf16] [--cpu] [--deepspeed] [--detail]\n",
               why);
  return 2;
}

double Gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  using namespace zero;
  double params = 0;
  int64_t hidden = 0;
  std::string safetensors, config_path, dtype_name;
  EstimateTopology topo{1, 1, true};
  int only_stage = -1;
  bool deepspeed = false, detail = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--params" && (v = next())) params = std::atof(v);
    else if (a == "--hidden" && (v = next())) hidden = std::atoll(v);
    else if (a == "--safetensors" && (v = next())) safetensors = v;
    else if (a == "--config" && (v = next())) config_path = v;
    else if (a == "--ranks-per-node" && (v = next())) topo.ranks_per_node = std::atoi(v);
    else if (a == "--nodes" && (v = next())) topo.nodes = std::atoi(v);
    else if (a == "--stage" && (v = next())) only_stage = std::atoi(v);
    else if (a == "--dtype" && (v = next())) dtype_name = v;
    else if (a == "--cpu") topo.gpu = false;
    else if (a == "--deepspeed") deepspeed = true;
    else if (a == "--detail") detail = true;
    else if (a == "-h" || a == "--help") return Usage("memory per rank, by stage and offload");
    else return Usage(("unknown or incomplete argument " + a).c_str());
  }
  Config base;
  base.dtype = DType::kF16;  // mixed precision, as the ZeRO paper's tables
  base.reduce_bucket_size_auto = base.stage3_prefetch_bucket_size_auto =
      base.stage3_param_persistence_threshold_auto = true;
  if (!config_path.empty()) {
    std::ifstream f(config_path);
    if (!f) return Usage(("cannot read " + config_path).c_str());
    std::stringstream ss;
    ss << f.rdbuf();
    auto c = ParseDsConfig(ss.str());
    if (!c.ok()) {
      std::fprintf(stderr, "zero-estimate: %s: %s\n", config_path.c_str(),
                   std::string(c.status().message()).c_str());
      return 1;
    }
    base = *c;
  }
  if (dtype_name == "fp32") base.dtype = DType::kF32;
  else if (dtype_name == "fp16") base.dtype = DType::kF16;
  else if (dtype_name == "bf16") base.dtype = DType::kBF16;
  else if (!dtype_name.empty()) return Usage("--dtype is fp32, fp16 or bf16");

  std::vector<EstimateParam> ps;
  std::string source;
  if (!safetensors.empty()) {
    auto set = ckpt::SafetensorsSet::Open(safetensors);
    if (!set.ok()) {
      std::fprintf(stderr, "zero-estimate: %s\n", std::string(set.status().message()).c_str());
      return 1;
    }
    for (const auto& [name, t] : (*set)->tensors()) {
      ps.push_back({t.numel, static_cast<int>(t.shape.size()), true, base.dtype,
                    t.shape.size() == 2 ? std::min(t.shape[0], t.shape[1]) : 0});
      // Under Muon: DeepSpeed's rule by name, the matrix viewed as
      // shape[0] x the rest.
      ps.back().use_muon = MuonDefault(name, t.shape) ? 1 : 0;
      if (t.shape.size() > 2 && t.shape[0] > 0) {
        ps.back().min_dim = std::min(t.shape[0], t.numel / t.shape[0]);
      }
    }
    source = safetensors;
  } else if (params > 0) {
    const int64_t n = static_cast<int64_t>(params);
    if (hidden <= 0) {
      // A GPT-like width for the count: about 12 h^2 per layer, 40 layers.
      hidden = static_cast<int64_t>(std::sqrt(params / 12.0 / 40.0) / 64.0 + 0.5) * 64;
      if (hidden < 64) hidden = 64;
    }
    ps = GptShapedParams(n, hidden);
    source = absl::StrFormat("GPT-shaped, hidden %d", hidden);
  } else {
    return Usage("give --params or --safetensors");
  }
  int64_t total = 0, largest = 0;
  for (const EstimateParam& p : ps) total += p.numel, largest = std::max(largest, p.numel);

  const int world = topo.ranks_per_node * topo.nodes;
  std::printf("zero-estimate: %.3fB params (%s), largest tensor %.1fM, %d ranks "
              "(%d per node x %d nodes), %s working copy, %s device\n",
              total / 1e9, source.c_str(), largest / 1e6, world, topo.ranks_per_node,
              topo.nodes, DTypeName(base.dtype), topo.gpu ? "GPU" : "CPU");
  std::printf("  per rank: model states + zero's buffers; peak adds stage 3's live gathered params\n");
  std::printf("  %-5s  %-34s %12s %12s %14s\n", "stage", "offload", "device GiB", "peak GiB",
              "host/node GiB");
  struct Choice {
    const char* name;
    OffloadDevice optim, param;
  };
  const Choice choices[] = {{"none", OffloadDevice::kNone, OffloadDevice::kNone},
                            {"optimizer=cpu", OffloadDevice::kCpu, OffloadDevice::kNone},
                            {"optimizer=nvme", OffloadDevice::kNvme, OffloadDevice::kNone},
                            {"optimizer=nvme, param=nvme", OffloadDevice::kNvme,
                             OffloadDevice::kNvme}};
  for (int stage = 0; stage <= 3; ++stage) {
    if (only_stage >= 0 && stage != only_stage) continue;
    for (const Choice& ch : choices) {
      Config c = base;
      c.stage = stage;
      c.offload_optimizer.device = ch.optim;
      c.offload_param.device = ch.param;
      // A choice the engine refuses (offload_param below stage 3) has no row.
      if (!DecideOffloadPlacement(c, !topo.gpu, topo.gpu ? "gpu" : "cpu").ok()) continue;
      auto e = EstimateMemory(ps, c, topo);
      if (!e.ok()) {
        std::fprintf(stderr, "zero-estimate: %s\n", std::string(e.status().message()).c_str());
        return 1;
      }
      std::printf("  %-5d  %-34s %12.2f %12.2f %14.2f%s\n", stage, ch.name, Gib(e->device_bytes),
                  Gib(e->device_peak_bytes), Gib(e->host_bytes_per_node),
                  e->nvme_bytes ? absl::StrFormat("  (+%.2f GiB nvme per rank)",
                                                  Gib(e->nvme_bytes)).c_str()
                                : "");
      if (detail) std::printf("%s", FormatEstimate(*e, topo).c_str());
    }
  }
  if (deepspeed) {
    std::printf("\nDeepSpeed's estimate (estimate_zero2/zero3_model_states_mem_needs, "
                "largest layer = largest tensor %.1fM):\n", largest / 1e6);
    std::printf("  %-5s  %9s | %9s | %s\n", "stage", "per CPU", "per GPU", "Options");
    for (const DeepSpeedEstimate& d :
         DeepSpeedEstimates(total, largest, topo.ranks_per_node, topo.nodes)) {
      std::printf("  %-5d  %7.2fGB | %7.2fGB | %s\n", d.stage, Gib(d.cpu_bytes), Gib(d.gpu_bytes),
                  d.label.c_str());
    }
  }
  return 0;
}
