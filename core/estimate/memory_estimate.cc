#include "core/estimate/memory_estimate.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/engine/auto_sizes.h"
#include "core/engine/gradient_reducer.h"
#include "core/engine/host_state_store.h"
#include "core/engine/offload_placement.h"
#include "core/engine/optimizer_state_store.h"
#include "core/engine/packed_moments.h"
#include "core/engine/param_coordinator.h"
#include "core/estimate/muon_estimate.h"
#include "core/partition/layout.h"

namespace zero {
namespace {

constexpr int64_t kFileAlign = 4096;  // nvme_tier.cc and param_file.cc

int64_t RoundUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

}  // namespace

absl::StatusOr<MemoryEstimate> EstimateMemory(const std::vector<EstimateParam>& params,
                                              const Config& config_in,
                                              const EstimateTopology& topo) {
  if (topo.ranks_per_node < 1 || topo.nodes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "estimate: ranks_per_node and nodes must be >= 1, got ", topo.ranks_per_node, " and ",
        topo.nodes));
  }
  if (config_in.stage < 0 || config_in.stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("estimate: zero_optimization.stage must be 0-3, got ", config_in.stage));
  }
  // Where each state lives: the engine's own decision (offload_placement.h).
  const absl::StatusOr<OffloadPlacement> placed =
      DecideOffloadPlacement(config_in, !topo.gpu, topo.gpu ? "gpu" : "cpu");
  if (!placed.ok()) {
    return absl::Status(placed.status().code(),
                        absl::StrCat("estimate: ", placed.status().message()));
  }
  const OffloadPlacement& where = *placed;
  Config c = config_in;
  const int world = topo.ranks_per_node * topo.nodes;
  const int stage = c.stage;
  const int64_t es = static_cast<int64_t>(DTypeSize(c.dtype));
  MemoryEstimate e;
  e.world = world;
  e.stage = stage;

  // The engine's "auto" sizes (auto_sizes.h); a param given without its
  // smaller dimension is taken as square.
  int64_t largest = 1;
  std::vector<SizingParam> sizing;
  std::vector<LayoutParam> lps;
  for (size_t i = 0; i < params.size(); ++i) {
    const EstimateParam& p = params[i];
    if (p.numel < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("estimate: param ", i, " has a negative element count"));
    }
    if (!p.trainable) {
      e.frozen_bytes += p.numel * static_cast<int64_t>(DTypeSize(p.dtype));
      continue;
    }
    SizingParam s{p.numel, true, p.ndim == 2, p.min_dim};
    if (s.matrix && s.min_dim <= 0) {
      s.min_dim = static_cast<int64_t>(std::sqrt(static_cast<double>(p.numel)));
    }
    sizing.push_back(s);
    largest = std::max(largest, p.numel);
    lps.push_back({static_cast<int>(i), p.numel, c.dtype});
  }
  ResolveAutoSizes(sizing, &c);
  e.reduce_bucket_size = c.reduce_bucket_size;
  e.comm_dtype = c.CommDType();
  e.prefetch_bucket_size = c.stage3_prefetch_bucket_size;
  e.persistence_threshold = c.stage3_param_persistence_threshold;

  const Layout layout(lps, world, c.sub_group_size);
  e.trainable_numel = layout.total_numel();
  e.padded_numel = layout.total_padded();
  const bool nvme_params = where.params == StateTier::kNvme;
  const bool nvme_optim = where.optimizer_state == StateTier::kNvme;
  // A host shard (offload_param "cpu" on a GPU) is counted in param_bytes,
  // as zero_stats does.
  const bool host_params = where.params == StateTier::kHost;
  int64_t host_param_bytes = 0;
  std::vector<int64_t> owned;
  int64_t owned_total = 0;
  for (const LayoutGroup& g : layout.groups()) {
    // ShardedState::Allocate
    e.param_bytes += (stage == 3 ? (nvme_params ? 0 : g.shard) : g.padded) * es;
    if (host_params) host_param_bytes += g.shard * es;
    // The gradient shard in a file (stage 3, NVMe state, the cpu device).
    if (where.grads_on_nvme) {
      e.nvme_bytes += std::max(kFileAlign, RoundUp(g.shard * es, kFileAlign));
    } else {
      e.grad_bytes += (stage <= 1 ? g.padded : g.shard) * es;
    }
    owned.push_back(stage == 0 ? g.padded : g.shard);
    owned_total += owned.back();
    // ParamFile: one slot, two with offload_param.atomic_step.
    if (nvme_params) {
      e.nvme_bytes += (c.offload_param.atomic_step ? 2 : 1) *
                      std::max(kFileAlign, RoundUp(g.shard * es, kFileAlign));
    }
  }
  // Stage 3: ParamCoordinator::AllocatePersistent, and the live budget.
  if (stage == 3) {
    int64_t gathered = 0;
    for (const LayoutParam& lp : layout.params()) {
      if (lp.numel < c.stage3_param_persistence_threshold) {
        e.persistent_bytes += lp.numel * es;
      } else {
        gathered += lp.numel;
      }
    }
    e.param_bytes += e.persistent_bytes;
    // ParamCoordinator::AllocatePersistent: the refresh's coalescing staging.
    std::vector<int64_t> persistent_numels;
    for (const LayoutParam& lp : layout.params()) {
      if (lp.numel < c.stage3_param_persistence_threshold) persistent_numels.push_back(lp.numel);
    }
    e.staging_bytes +=
        CoalescedRefreshElems(persistent_numels, world, c.allgather_bucket_size) * es;
    e.live_peak_bytes = std::min(gathered, c.stage3_max_live_parameters) * es;
  }
  // Optimizer state: MakeOptimizerStateStore.
  const int arrays = StateArrays(c);
  if (nvme_optim) {
    // NvmeTier::Create: chunks of sub_group_size elements, each array's
    // region (packed moments: their own bytes) 4 KiB-aligned,
    // min(max(2, buffer_count), chunks) host buffers.
    int64_t chunks = 0, buffer = kFileAlign;
    for (int64_t len : owned) {
      int64_t slot = 0;
      const int64_t ce = std::max<int64_t>(1, c.sub_group_size);
      for (int64_t b = 0; b < len; b += ce) {
        int64_t bytes = 0;
        for (int a = 0; a < arrays; ++a) {
          bytes += RoundUp(StateArrayBytes(c, a, std::min(ce, len - b)), kFileAlign);
        }
        slot += bytes;
        buffer = std::max(buffer, bytes);
        ++chunks;
      }
      e.nvme_bytes += (c.offload_optimizer.atomic_step ? 2 : 1) * slot;
    }
    const int64_t nbuf =
        std::max<int64_t>(1, std::min<int64_t>(std::max(2, c.offload_optimizer.buffer_count), chunks));
    e.optimizer_bytes = nbuf * buffer;
  } else {
    // DeviceStateStore: an fp32 master may be the working copy's owned range.
    e.master_bytes = where.master_aliases_working ? 0 : owned_total * 4;
    // Packed moments (core/engine/packed_moments.h): their own bytes.
    for (int64_t len : owned) {
      for (int a = 1; a < arrays; ++a) e.optimizer_bytes += StateArrayBytes(c, a, len);
    }
  }
  // Buffers. ShardedState: the stage 1-2 all-gather staging.
  if ((stage == 1 || stage == 2) && world > 1) {
    const int64_t chunk = std::max<int64_t>(1, c.allgather_bucket_size / world);
    for (const LayoutGroup& g : layout.groups()) {
      if (g.shard > chunk) {
        e.staging_bytes = chunk * world * es;
        break;
      }
    }
  }
  // GradientReducer::Allocate: two buckets, the fp32 pack (with fp16/bf16
  // reductions also its 2-byte send and receive), the receive, and one
  // gradient buffer for params larger than a bucket.
  if (!lps.empty()) {
    const int64_t cap = std::max<int64_t>(1, std::min(c.reduce_bucket_size, e.padded_numel));
    const int64_t pack = std::max<int64_t>(cap, world);
    e.bucket_bytes = 2 * cap * es;
    e.pack_bytes = pack * 4;
    if (c.CommDType() != DType::kF32) e.pack_bytes += pack * 2 * 2;
    if (stage >= 2 && c.reduce_scatter) e.recv_bytes = pack * 4;
    if (largest > cap) e.large_grad_bytes = largest * es;
  }
  // OptimizerBoundary: the fp32 gradient scratch at stage 1 (its
  // reduce-scatter's target, unless that is the identity), and for
  // fp16/bf16 on a device without the fused update (the GPU; the CPU device
  // reads raw gradients in place) or with the state in a host store apart
  // from the device (the delayed update on the CPU device).
  const bool scatter = stage == 1 && !Stage1ReduceIsIdentity(c, world);
  const bool host_store = where.optimizer_state == StateTier::kHost;
  if (where.grads_on_nvme) {
    // Stage 3 with offload_optimizer nvme on the cpu: one group's
    // gradients, raw and fp32, streamed from the gradient files.
    int64_t most = 1;
    for (int64_t len : owned) most = std::max(most, len);
    e.scratch_bytes = most * (es + 4);
    // UpdateIoPipeline (after the first step): buffer_count gradient
    // buffers of the largest sub-group, and as many working-copy buffers
    // with offload_param nvme.
    int64_t piece = 0;
    for (int64_t len : owned) {
      piece = std::max(piece, std::min<int64_t>(std::max<int64_t>(1, c.sub_group_size), len));
    }
    const int64_t depth = std::max(2, c.offload_optimizer.buffer_count);
    const int64_t sets = nvme_params ? 2 : 1;
    e.scratch_bytes += sets * depth * std::max<int64_t>(1, piece) * es;
  } else if (c.dtype != DType::kF32 && (topo.gpu || host_store)) {
    e.scratch_bytes = owned_total * 4;
  } else if (scatter) {
    // fp32 with the update on the engine's device: a group's target is its
    // owned range of the gradient, except where the reduce-scatter reads
    // the gradient unpacked (Stage1ScatterReadsGrads).
    // (OptimizerStateStore::memory_device() is the engine's device: on a
    // GPU not with the state offloaded, to the host or to NVMe.)
    const bool state_off_device =
        host_store || (topo.gpu && where.optimizer_state != StateTier::kDevice);
    const int64_t pack_cap = ReducerPackCap(c, e.padded_numel, world);
    for (const LayoutGroup& g : layout.groups()) {
      if (c.dtype != DType::kF32 || state_off_device ||
          Stage1ScatterReadsGrads(c, world, world, pack_cap, g.shard)) {
        e.scratch_bytes += g.shard * 4;
      }
    }
  }
  // NvmeStateStore on a GPU: the largest piece's master and moments on the
  // device, twice (piece k's update while k+1 goes up).
  int64_t nvme_up_bytes = 0;
  if (topo.gpu && nvme_optim) {
    int64_t piece = 0;
    for (int64_t len : owned) {
      piece = std::max(piece, std::min<int64_t>(std::max<int64_t>(1, c.sub_group_size), len));
    }
    for (int a = 0; a < arrays; ++a) {
      nvme_up_bytes += 2 * StateArrayBytes(c, a, std::max<int64_t>(1, piece));
    }
  }
  // The Muon phase's host buffers (muon_estimate.h): the busiest rank's.
  e.muon_rank_bytes = EstimateMuonBytesPerRank(params, c, layout, world);
  for (int64_t b : e.muon_rank_bytes) e.muon_bytes = std::max(e.muon_bytes, b);
  e.buffer_bytes = e.bucket_bytes + e.pack_bytes + e.recv_bytes + e.staging_bytes +
                   e.scratch_bytes + e.large_grad_bytes + nvme_up_bytes + e.muon_bytes;

  // HostStateStore::Update: 2 fp32 + 2 working buffers of the largest piece;
  // with delayed_update instead the owned gradients (fp32) and working copy
  // (es) in host memory (DelayedHostUpdate).
  if (where.optimizer_state == StateTier::kHost && c.offload_optimizer.delayed_update) {
    for (int64_t len : owned) e.offload_pipeline_bytes += len * (4 + es);
  } else if (where.optimizer_state == StateTier::kHost) {
    const int64_t piece = HostUpdatePieceElems(c, owned);
    e.offload_pipeline_bytes = 2 * piece * 4 + 2 * piece * es;
  }

  const int64_t states = e.master_bytes + e.optimizer_bytes;
  // Muon's buffers are host memory: apart from a GPU's.
  const int64_t on_device = e.param_bytes - host_param_bytes + e.grad_bytes + e.frozen_bytes +
                            e.buffer_bytes - (topo.gpu ? e.muon_bytes : 0);
  if (topo.gpu) {
    const bool states_on_device = where.optimizer_state == StateTier::kDevice;
    e.device_bytes = on_device + (states_on_device ? states : 0);
    e.host_bytes = (states_on_device ? 0 : states) + e.offload_pipeline_bytes + host_param_bytes +
                   e.muon_bytes;
    e.host_bytes_per_node = e.host_bytes * topo.ranks_per_node;
  } else {
    // The CPU device's memory is host memory (the delayed update's buffers too).
    e.device_bytes = on_device + states + e.offload_pipeline_bytes;
    e.host_bytes = 0;
    e.host_bytes_per_node = e.device_bytes * topo.ranks_per_node;
  }
  e.device_peak_bytes = e.device_bytes + e.live_peak_bytes;
  if (!topo.gpu) e.host_bytes_per_node += e.live_peak_bytes * topo.ranks_per_node;
  return e;
}

std::vector<DeepSpeedEstimate> DeepSpeedEstimates(int64_t total_params, int64_t largest_layer_params,
                                                  int ranks_per_node, int nodes) {
  const double P = static_cast<double>(total_params);
  const double L = static_cast<double>(largest_layer_params);
  const double G = static_cast<double>(ranks_per_node) * nodes;
  const double per_node = ranks_per_node;
  const double f = 1.5;  // additional_buffer_factor
  std::vector<DeepSpeedEstimate> out;
  // stage_1_and_2.estimate_zero2_model_states_mem_needs
  out.push_back({"offload_optimizer=cpu", 2, 2 * P, P * std::max(4 * G, 16.0) * f});
  out.push_back({"offload_optimizer=none", 2, 4 * P + std::floor(16 * P / G), P * 4 * per_node * f});
  // stage3.estimate_zero3_model_states_mem_needs
  const double gf = 1.0 / nodes, layer = 4 * L;
  for (int zero_init = 1; zero_init >= 0; --zero_init) {
    const std::string zi = absl::StrCat(", zero_init=", zero_init);
    out.push_back({"offload_param=cpu, offload_optimizer=cpu" + zi, 3, layer,
                   zero_init ? P * 18 * gf * f : P * std::max(4 * per_node, 18 * gf) * f});
    out.push_back({"offload_param=none, offload_optimizer=cpu" + zi, 3,
                   layer + std::floor(2 * P / G),
                   zero_init ? P * 16 * gf * f : P * std::max(4 * per_node, 16 * gf) * f});
    out.push_back({"offload_param=none, offload_optimizer=none" + zi, 3,
                   layer + std::floor(18 * P / G),
                   zero_init ? L * 4 * per_node * f : P * 4 * per_node * f});
  }
  return out;
}

std::vector<EstimateParam> GptShapedParams(int64_t total, int64_t hidden) {
  std::vector<EstimateParam> ps;
  const int64_t h = std::max<int64_t>(1, hidden);
  const int64_t layer = 12 * h * h + 13 * h;
  int64_t layers = (total - 50257 * h - 2 * h) / layer;
  if (layers < 1) layers = std::max<int64_t>(0, total / (2 * layer));
  auto add = [&](int64_t rows, int64_t cols) {
    ps.push_back({rows * cols, cols == 1 ? 1 : 2, true, DType::kF32,
                  cols == 1 ? 0 : std::min(rows, cols)});
  };
  const int64_t vocab = std::max<int64_t>(1, (total - layers * layer - 2 * h) / h);
  add(vocab, h);
  ps.back().use_muon = 0;  // the embedding: AdamW under Muon (DeepSpeed's rule)
  for (int64_t l = 0; l < layers; ++l) {
    add(h, 1), add(h, 1);          // ln1
    add(3 * h, h), add(3 * h, 1);  // qkv
    add(h, h), add(h, 1);          // proj
    add(h, 1), add(h, 1);          // ln2
    add(4 * h, h), add(4 * h, 1);  // fc
    add(h, 4 * h), add(h, 1);      // fc2
  }
  add(h, 1), add(h, 1);  // final ln
  return ps;
}

namespace {

std::string Bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) b /= 1024, ++u;
  return absl::StrFormat(u == 0 ? "%.0f %s" : "%.2f %s", b, unit[u]);
}

}  // namespace

std::string FormatEstimate(const MemoryEstimate& e, const EstimateTopology& topo) {
  std::string s = absl::StrFormat(
      "zero estimate: stage %d, %d ranks (%d per node x %d nodes), %d trainable params "
      "(%d padded)\n",
      e.stage, e.world, topo.ranks_per_node, topo.nodes, e.trainable_numel, e.padded_numel);
  auto line = [&](const char* what, int64_t b, const std::string& note = "") {
    if (b == 0 && note.empty()) return;
    absl::StrAppendFormat(&s, "  %-24s %12s%s\n", what, Bytes(static_cast<double>(b)),
                          note.empty() ? "" : "  (" + note + ")");
  };
  line("working params", e.param_bytes,
       e.persistent_bytes ? absl::StrCat("persistent ", Bytes(e.persistent_bytes)) : "");
  line("gradients", e.grad_bytes);
  line("fp32 master", e.master_bytes);
  line("optimizer moments", e.optimizer_bytes);
  line("frozen params", e.frozen_bytes);
  line("buffers", e.buffer_bytes,
       absl::StrFormat("buckets %s, pack %s, receive %s, staging %s, fp32 scratch %s, "
                       "large-param gradient %s; reduce_bucket_size %d, reduced in %s",
                       Bytes(e.bucket_bytes), Bytes(e.pack_bytes), Bytes(e.recv_bytes),
                       Bytes(e.staging_bytes), Bytes(e.scratch_bytes),
                       Bytes(e.large_grad_bytes), e.reduce_bucket_size,
                       DTypeName(e.comm_dtype)));
  if (e.muon_bytes > 0) {
    line("  of which Muon", e.muon_bytes, "host, the busiest rank's: owners differ per rank");
  }
  if (e.stage == 3) {
    line("live gathered (max)", e.live_peak_bytes,
         absl::StrFormat("prefetch %d elements, persistence < %d", e.prefetch_bucket_size,
                         e.persistence_threshold));
  }
  line("nvme files", e.nvme_bytes);
  line("offload pipeline", e.offload_pipeline_bytes, "during a step");
  absl::StrAppendFormat(&s, "  per rank: %s %s (peak %s), host %s; per node host %s\n",
                        topo.gpu ? "device" : "memory", Bytes(e.device_bytes),
                        Bytes(e.device_peak_bytes), Bytes(e.host_bytes),
                        Bytes(e.host_bytes_per_node));
  return s;
}

}  // namespace zero
