// The C ABI's calls that observe a run: the engine's stats, the step
// breakdown, the communication log and its summary, the flight record and
// the per-link traffic.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/abi_struct.h"
#include "capi/call_support.h"
#include "core/engine/engine.h"
#include "zero_c.h"

namespace {

using zero_capi::BadStruct;
using zero_capi::CheckStructSize;
using zero_capi::Guard;
using zero_capi::Report;
using zero_capi::WriteStruct;
using zero_capi::ZeroStruct;

}  // namespace

extern "C" {

zero_status zero_engine_stats(const zero_engine_t* engine, zero_stats* stats) {
  ZERO_CHECK_ARG("zero_engine_stats", engine);
  ZERO_CHECK_ARG("zero_engine_stats", stats);
  absl::Status size_ok = CheckStructSize(stats);
  if (!size_ok.ok()) return BadStruct("zero_engine_stats", size_ok);
  return Guard([&] {
    zero::EngineStats s = engine->engine->Stats();
    zero_stats out = ZeroStruct<zero_stats>();
    out.rank = s.rank;
    out.world_size = s.world_size;
    out.stage = s.stage;
    out.trainable_numel = s.trainable_numel;
    out.padded_numel = s.padded_numel;
    out.master_bytes = s.master_bytes;
    out.optimizer_bytes = s.optimizer_bytes;
    out.grad_bytes = s.grad_bytes;
    out.param_bytes = s.param_bytes;
    out.frozen_bytes = s.frozen_bytes;
    out.buffer_bytes = s.buffer_bytes;
    out.live_gathered_bytes = s.live_gathered_bytes;
    out.live_gathered_high_water = s.live_gathered_high_water;
    using K = zero::CollectiveKind;
    out.sent_allgather = s.sent[static_cast<int>(K::kAllGather)];
    out.sent_reduce_scatter = s.sent[static_cast<int>(K::kReduceScatter)];
    out.sent_allreduce = s.sent[static_cast<int>(K::kAllReduce)];
    out.sent_broadcast = s.sent[static_cast<int>(K::kBroadcast)];
    out.sent_control = s.sent[static_cast<int>(K::kControl)];
    out.collective_calls = s.collective_calls;
    out.global_step = s.global_step;
    out.skipped_steps = s.skipped_steps;
    out.micro_step = s.micro_step;
    out.sent_bytes_allgather = s.sent_bytes[static_cast<int>(K::kAllGather)];
    out.sent_bytes_reduce_scatter = s.sent_bytes[static_cast<int>(K::kReduceScatter)];
    out.sent_bytes_allreduce = s.sent_bytes[static_cast<int>(K::kAllReduce)];
    out.nvme_bytes = s.nvme_bytes;
    out.nvme_read_bytes = s.nvme_read_bytes;
    out.nvme_write_bytes = s.nvme_write_bytes;
    out.nvme_direct_io = s.nvme_direct_io;
    out.nvme_uring = s.nvme_uring;
    WriteStruct(out, stats);  // an older caller's struct gets its prefix only
    return Report(absl::OkStatus());
  });
}

// ---- 1.5: observing a run ----------------------------------------------

zero_status zero_engine_step_breakdown(const zero_engine_t* engine, zero_step_breakdown* out) {
  ZERO_CHECK_ARG("zero_engine_step_breakdown", engine);
  ZERO_CHECK_ARG("zero_engine_step_breakdown", out);
  absl::Status size_ok = CheckStructSize(out);
  if (!size_ok.ok()) return BadStruct("zero_engine_step_breakdown", size_ok);
  return Guard([&] {
    const zero::Recorder* r = engine->engine->recorder();
    if (r == nullptr) {
      return Report(absl::FailedPreconditionError(
          "zero_engine_step_breakdown: the config has no \"wall_clock_breakdown\": true "
          "(nor \"zero_trace\")"));
    }
    const zero::StepBreakdown& b = r->last();
    using P = zero::Phase;
    zero_step_breakdown o = ZeroStruct<zero_step_breakdown>();
    o.global_step = b.global_step;
    o.micro_steps = b.micro_steps;
    o.step_ms = b.step_ms;
    o.forward_ms = b.at(P::kForward);
    o.backward_ms = b.at(P::kBackward);
    o.optimizer_ms = b.at(P::kStep);
    o.reduce_ms = b.at(P::kReduce);
    o.reduce_exposed_ms = b.at(P::kReduceExposed) + b.at(P::kReduceDrain);
    o.reduce_hidden_ms = b.reduce_hidden_ms();
    o.gather_ms = b.at(P::kGather);
    o.gather_exposed_ms = b.at(P::kGatherExposed);
    o.gather_hidden_ms = b.gather_hidden_ms();
    o.boundary_reduce_ms = b.at(P::kBoundaryReduce);
    o.norm_ms = b.at(P::kNorm);
    o.update_ms = b.at(P::kUpdate);
    o.publish_ms = b.at(P::kPublish);
    o.nvme_read_bytes = b.nvme_read_bytes;
    o.nvme_write_bytes = b.nvme_write_bytes;
    o.nvme_read_ms = b.at(P::kNvmeRead);
    o.nvme_write_ms = b.at(P::kNvmeWrite);
    o.nvme_exposed_ms = b.at(P::kNvmeExposed);
    o.nvme_hidden_ms = b.nvme_hidden_ms();
    WriteStruct(o, out);
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_comm_log(const zero_engine_t* engine, zero_comm_log_entry* entries,
                                 int32_t capacity, int32_t* count) {
  ZERO_CHECK_ARG("zero_engine_comm_log", engine);
  ZERO_CHECK_ARG("zero_engine_comm_log", count);
  if (capacity < 0 || (capacity > 0 && entries == nullptr)) {
    return Report(absl::InvalidArgumentError(
        "zero_engine_comm_log: entries is null or capacity is negative"));
  }
  for (int32_t i = 0; i < capacity; ++i) {
    absl::Status size_ok = CheckStructSize(&entries[i]);
    if (!size_ok.ok()) return BadStruct("zero_engine_comm_log", size_ok);
  }
  return Guard([&] {
    const zero::CommLog* log = engine->engine->comm_log();
    if (log == nullptr) {
      return Report(absl::FailedPreconditionError(
          "zero_engine_comm_log: the config has no \"comms_logger\": {\"enabled\": true}"));
    }
    const std::vector<zero::CommLogEntry> es = log->Entries();
    *count = static_cast<int32_t>(es.size());
    for (int32_t i = 0; i < capacity && i < static_cast<int32_t>(es.size()); ++i) {
      const zero::CommLogEntry& e = es[i];
      zero_comm_log_entry o = ZeroStruct<zero_comm_log_entry>();
      o.op = static_cast<int32_t>(e.op);
      o.control = e.kind == zero::CollectiveKind::kControl ? 1 : 0;
      o.bucket_bytes = e.bucket_bytes;
      o.count = e.count;
      o.bytes = e.bytes;
      o.sent_bytes = e.sent_bytes;
      o.total_ms = e.total_ms;
      o.mean_ms = e.mean_ms();
      o.algbw_gbs = e.algbw_gbs();
      o.busbw_gbs = e.busbw_gbs(log->world());
      WriteStruct(o, &entries[i]);
    }
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_comm_log_summary(const zero_engine_t* engine, char* buf,
                                         size_t capacity, size_t* length) {
  ZERO_CHECK_ARG("zero_engine_comm_log_summary", engine);
  ZERO_CHECK_ARG("zero_engine_comm_log_summary", length);
  if (capacity > 0 && buf == nullptr) {
    return Report(absl::InvalidArgumentError("zero_engine_comm_log_summary: buf is null"));
  }
  return Guard([&] {
    const zero::CommLog* log = engine->engine->comm_log();
    if (log == nullptr) {
      return Report(absl::FailedPreconditionError(
          "zero_engine_comm_log_summary: the config has no \"comms_logger\": "
          "{\"enabled\": true}"));
    }
    const std::string s = log->Summary();
    *length = s.size();
    if (capacity > s.size()) {
      std::memcpy(buf, s.c_str(), s.size() + 1);
    } else if (capacity > 0) {
      buf[0] = '\0';
    }
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_flight_record(const zero_engine_t* engine, char* buf, size_t capacity,
                                      size_t* length) {
  ZERO_CHECK_ARG("zero_engine_flight_record", engine);
  ZERO_CHECK_ARG("zero_engine_flight_record", length);
  if (capacity > 0 && buf == nullptr) {
    return Report(absl::InvalidArgumentError("zero_engine_flight_record: buf is null"));
  }
  return Guard([&] {
    const std::string s = engine->engine->FlightRecord();
    *length = s.size();
    if (capacity > s.size()) {
      std::memcpy(buf, s.c_str(), s.size() + 1);
    } else if (capacity > 0) {
      buf[0] = '\0';
    }
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_link_stats(const zero_engine_t* engine, zero_link_stats* stats) {
  ZERO_CHECK_ARG("zero_engine_link_stats", engine);
  ZERO_CHECK_ARG("zero_engine_link_stats", stats);
  absl::Status size_ok = CheckStructSize(stats);
  if (!size_ok.ok()) return BadStruct("zero_engine_link_stats", size_ok);
  return Guard([&] {
    zero::EngineStats s = engine->engine->Stats();
    zero_link_stats out = ZeroStruct<zero_link_stats>();
    out.nodes = s.nodes;
    out.node = s.node;
    out.ranks_per_node = s.ranks_per_node;
    out.replicas = s.replicas;
    out.hpz_secondary_bytes = s.hpz_secondary_bytes;
    using K = zero::CollectiveKind;
    auto b = [&](K k, int l) { return s.link_bytes[static_cast<int>(k)][l]; };
    auto v = [&](K k, int l) { return s.link_elems[static_cast<int>(k)][l]; };
    out.intra_bytes_allgather = b(K::kAllGather, 0);
    out.inter_bytes_allgather = b(K::kAllGather, 1);
    out.intra_bytes_reduce_scatter = b(K::kReduceScatter, 0);
    out.inter_bytes_reduce_scatter = b(K::kReduceScatter, 1);
    out.intra_bytes_allreduce = b(K::kAllReduce, 0);
    out.inter_bytes_allreduce = b(K::kAllReduce, 1);
    out.intra_bytes_broadcast = b(K::kBroadcast, 0);
    out.inter_bytes_broadcast = b(K::kBroadcast, 1);
    out.intra_bytes_control = b(K::kControl, 0);
    out.inter_bytes_control = b(K::kControl, 1);
    out.intra_values_allgather = v(K::kAllGather, 0);
    out.inter_values_allgather = v(K::kAllGather, 1);
    out.intra_values_reduce_scatter = v(K::kReduceScatter, 0);
    out.inter_values_reduce_scatter = v(K::kReduceScatter, 1);
    out.intra_values_allreduce = v(K::kAllReduce, 0);
    out.inter_values_allreduce = v(K::kAllReduce, 1);
    out.intra_values_broadcast = v(K::kBroadcast, 0);
    out.inter_values_broadcast = v(K::kBroadcast, 1);
    out.intra_values_control = v(K::kControl, 0);
    out.inter_values_control = v(K::kControl, 1);
    WriteStruct(out, stats);
    return Report(absl::OkStatus());
  });
}

}  // extern "C"
