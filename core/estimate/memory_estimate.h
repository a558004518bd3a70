// Memory estimator (docs/ARCHITECTURE.md, "Memory estimator"): the bytes an
// engine will hold per rank, computed from the param shapes and the config
// without allocating anything, in the categories zero_stats reports. Uses the
// engine's own rules (ResolveAuto's sizes, Layout's padding, the buffers each
// part allocates), so a measured engine matches it; plus DeepSpeed's
// estimate_zero{2,3}_model_states_mem_needs formulas for comparison.
// Pure arithmetic: no memory, no communication.
#ifndef ZERO_CORE_ESTIMATE_MEMORY_ESTIMATE_H_
#define ZERO_CORE_ESTIMATE_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/dtype.h"
#include "core/config/config.h"

namespace zero {

struct EstimateParam {
  int64_t numel = 0;
  int ndim = 1;               // 2: counts for the "auto" sizes (hidden^2)
  bool trainable = true;
  DType dtype = DType::kF32;  // frozen params only; trainable ones use config.dtype
  // A 2-D param's smaller dimension (the hidden size of "auto" sizes when it
  // is the largest 2-D param); 0: taken as sqrt(numel).
  int64_t min_dim = 0;
  // With the Muon optimizer: 1 on Muon, 0 on AdamW, -1 at least 2-D
  // (DeepSpeed's rule without its names: pass 0 for embeddings and heads).
  // Muon views a param as shape[0] x the rest; min_dim is then that view's
  // smaller side.
  int use_muon = -1;
};

struct EstimateTopology {
  int ranks_per_node = 1;
  int nodes = 1;
  bool gpu = true;  // device memory apart from host memory (false: the CPU device)
};

// Per rank. The first block mirrors EngineStats after one optimizer step.
struct MemoryEstimate {
  int world = 1, stage = 0;
  int64_t trainable_numel = 0, padded_numel = 0;
  int64_t param_bytes = 0;      // working copy (+ stage-3 persistent params)
  int64_t grad_bytes = 0;
  int64_t master_bytes = 0;     // fp32 master in memory (0 with NVMe)
  int64_t optimizer_bytes = 0;  // moments in memory (NVMe: its host staging buffers)
  int64_t frozen_bytes = 0;
  int64_t buffer_bytes = 0;     // buckets, pack, receive, staging, fp32 scratch,
                                // the large-param gradient buffer
  int64_t nvme_bytes = 0;       // swap files on disk, both slots
  // Parts of buffer_bytes.
  int64_t bucket_bytes = 0, pack_bytes = 0, recv_bytes = 0, staging_bytes = 0,
          scratch_bytes = 0;
  // The own gradient buffer of params larger than a bucket (the largest).
  int64_t large_grad_bytes = 0;
  // The resolved sizes (after "auto").
  int64_t reduce_bucket_size = 0, prefetch_bucket_size = 0, persistence_threshold = 0;
  // The dtype gradients are reduced in (Config::CommDType: DeepSpeed's
  // default is the working dtype).
  DType comm_dtype = DType::kF32;
  int64_t persistent_bytes = 0;  // part of param_bytes
  // Stage 3: gathered params live at once, at most (the live budget or all
  // non-persistent params, whichever is smaller), on top of the above.
  int64_t live_peak_bytes = 0;
  // The Muon phase's host buffers (core/engine/muon_phase.h; part of
  // buffer_bytes, on the host): the busiest rank's, since owners differ per
  // rank; muon_rank_bytes[r] is rank r's (empty without Muon).
  int64_t muon_bytes = 0;
  std::vector<int64_t> muon_rank_bytes;
  // ZeRO-Offload with a GPU: the CPU optimizer's four pipeline buffers,
  // allocated during a step only.
  int64_t offload_pipeline_bytes = 0;
  // Where it lives.
  int64_t device_bytes = 0;    // steady state in the engine device's memory
  int64_t device_peak_bytes = 0;  // + live gathered params
  int64_t host_bytes = 0;      // host memory apart from the device (offloaded state)
  int64_t host_bytes_per_node = 0;
};

// DeepSpeed's model-state estimates (stage_1_and_2.py and stage3.py,
// release 0.16-0.19), for the same parameter count.
struct DeepSpeedEstimate {
  std::string label;  // e.g. "offload_optimizer=cpu"
  int stage = 2;
  double gpu_bytes = 0, cpu_bytes = 0;  // cpu: per node
};

absl::StatusOr<MemoryEstimate> EstimateMemory(const std::vector<EstimateParam>& params,
                                              const Config& config, const EstimateTopology& topo);

// estimate_zero2_model_states_mem_needs / estimate_zero3_... for every
// offload choice they list (additional_buffer_factor 1.5, zero_init true).
std::vector<DeepSpeedEstimate> DeepSpeedEstimates(int64_t total_params, int64_t largest_layer_params,
                                                  int ranks_per_node, int nodes);

// A GPT-shaped model of about `total` params with the given hidden size
// (layers of qkv 3h^2, proj h^2, fc 4h^2, fc2 4h^2 with biases and two
// layer norms; a vocab x h embedding taking what is left, off Muon): the
// estimator's input when only a count is known.
std::vector<EstimateParam> GptShapedParams(int64_t total, int64_t hidden);

// The report: per-rank categories and placement, then DeepSpeed's table.
std::string FormatEstimate(const MemoryEstimate& e, const EstimateTopology& topo);

}  // namespace zero

#endif  // ZERO_CORE_ESTIMATE_MEMORY_ESTIMATE_H_
