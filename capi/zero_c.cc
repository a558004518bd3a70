// The C ABI over the C++ core: the one place where absl::Status and C++
// exceptions become zero_status codes plus a thread-local message.
#include "zero_c.h"

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/status_code.h"
#include "core/ckpt/safetensors.h"
#include "core/comm/mpi_communicator.h"
#include "core/comm/thread_communicator.h"
#include "core/config/config.h"
#include "core/device/device_factory.h"
#include "core/engine/engine.h"

struct zero_comm_t {
  std::unique_ptr<zero::Communicator> comm;
};

struct zero_engine_t {
  std::unique_ptr<zero::Engine> engine;
};

namespace {

thread_local std::string g_last_error;

zero_status Report(const absl::Status& s) {
  if (s.ok()) {
    g_last_error.clear();
    return ZERO_OK;
  }
  g_last_error = std::string(s.message());
  return zero_capi::ToZeroStatus(s);
}

zero_status Null(const char* call, const char* what) {
  g_last_error = absl::StrCat(call, ": ", what, " is NULL");
  return ZERO_INVALID_ARGUMENT;
}

// Runs `f`, converting any escaping exception into a status.
template <typename F>
zero_status Guard(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    g_last_error = "out of memory";
    return ZERO_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    g_last_error = absl::StrCat("internal error: ", e.what());
    return ZERO_INTERNAL;
  } catch (...) {
    g_last_error = "internal error: unknown exception";
    return ZERO_INTERNAL;
  }
}

#define ZERO_CHECK_ARG(call, p) \
  if ((p) == nullptr) return Null(call, #p)

zero::DType ToDType(zero_dtype t) { return static_cast<zero::DType>(t); }

bool ValidDType(int t) { return t >= ZERO_DTYPE_F32 && t <= ZERO_DTYPE_BF16; }

// zero_config (C) -> zero::Config (C++). Negative means "DeepSpeed default".
absl::StatusOr<zero::Config> FromC(const zero_config* c) {
  if (c->struct_size < offsetof(zero_config, stage) + sizeof(int32_t)) {
    return absl::InvalidArgumentError("zero_config: struct_size too small; use ZERO_CONFIG_INIT");
  }
  zero::Config k;
  // Fields past the caller's struct_size keep their defaults (older callers).
  auto has = [&](size_t off, size_t sz) { return c->struct_size >= off + sz; };
#define HAS(f) has(offsetof(zero_config, f), sizeof(c->f))
  if (HAS(stage)) k.stage = c->stage;
  if (HAS(dtype)) {
    if (!ValidDType(c->dtype)) return absl::InvalidArgumentError(absl::StrCat("zero_config.dtype: expected 0..2, got ", static_cast<int>(c->dtype)));
    k.dtype = ToDType(c->dtype);
  }
  if (HAS(optimizer)) {
    switch (c->optimizer) {
      case ZERO_OPTIMIZER_ADAM: k.optimizer = zero::OptimizerType::kAdam; break;
      case ZERO_OPTIMIZER_ADAMW: k.optimizer = zero::OptimizerType::kAdamW; break;
      case ZERO_OPTIMIZER_SGD: k.optimizer = zero::OptimizerType::kSgd; break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("zero_config.optimizer: expected 0..2, got ", static_cast<int>(c->optimizer)));
    }
  }
  auto f = [](float v, double* out) { if (v >= 0.0f) *out = v; };
  auto i64 = [](int64_t v, int64_t* out) { if (v >= 0) *out = v; };
  if (HAS(lr)) f(c->lr, &k.lr);
  if (HAS(beta1)) f(c->beta1, &k.beta1);
  if (HAS(beta2)) f(c->beta2, &k.beta2);
  if (HAS(eps)) f(c->eps, &k.eps);
  if (HAS(weight_decay)) f(c->weight_decay, &k.weight_decay);
  if (HAS(momentum)) f(c->momentum, &k.momentum);
  if (HAS(gradient_accumulation_steps) && c->gradient_accumulation_steps >= 0) {
    if (c->gradient_accumulation_steps == 0) return absl::InvalidArgumentError("zero_config.gradient_accumulation_steps: expected >= 1, got 0");
    k.gradient_accumulation_steps = c->gradient_accumulation_steps;
  }
  if (HAS(gradient_clipping)) f(c->gradient_clipping, &k.gradient_clipping);
  if (HAS(reduce_bucket_size)) i64(c->reduce_bucket_size, &k.reduce_bucket_size);
  if (HAS(allgather_bucket_size)) i64(c->allgather_bucket_size, &k.allgather_bucket_size);
  if (HAS(overlap_comm) && c->overlap_comm >= 0) k.overlap_comm = c->overlap_comm ? 1 : 0;
  if (HAS(sub_group_size)) i64(c->sub_group_size, &k.sub_group_size);
  if (HAS(stage3_max_live_parameters)) i64(c->stage3_max_live_parameters, &k.stage3_max_live_parameters);
  if (HAS(stage3_prefetch_bucket_size)) i64(c->stage3_prefetch_bucket_size, &k.stage3_prefetch_bucket_size);
  if (HAS(stage3_param_persistence_threshold)) i64(c->stage3_param_persistence_threshold, &k.stage3_param_persistence_threshold);
  if (HAS(loss_scale)) f(c->loss_scale, &k.loss_scale);
  if (HAS(initial_scale_power) && c->initial_scale_power >= 0) k.initial_scale_power = c->initial_scale_power;
  if (HAS(loss_scale_window) && c->loss_scale_window >= 0) k.loss_scale_window = c->loss_scale_window;
  if (HAS(hysteresis) && c->hysteresis >= 0) k.hysteresis = c->hysteresis;
  if (HAS(min_loss_scale)) f(c->min_loss_scale, &k.min_loss_scale);
  if (HAS(steps_per_print) && c->steps_per_print >= 0) k.steps_per_print = c->steps_per_print;
  if (HAS(comm_timeout_seconds) && c->comm_timeout_seconds > 0) k.comm_timeout_seconds = c->comm_timeout_seconds;
#undef HAS
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

int32_t zero_version(void) { return ZERO_VERSION_CODE; }

const char* zero_status_string(zero_status status) {
  switch (status) {
    case ZERO_OK: return "ok";
    case ZERO_INVALID_ARGUMENT: return "invalid argument";
    case ZERO_FAILED_PRECONDITION: return "failed precondition (call in the wrong state)";
    case ZERO_NOT_FOUND: return "not found";
    case ZERO_OUT_OF_MEMORY: return "out of memory";
    case ZERO_TIMEOUT: return "timeout (a peer did not arrive)";
    case ZERO_IO_ERROR: return "i/o error";
    case ZERO_DATA_LOSS: return "data loss (corrupt data)";
    case ZERO_UNIMPLEMENTED: return "unimplemented";
    case ZERO_INTERNAL: return "internal error";
    case ZERO_ABORTED: return "aborted (communicator broken)";
    case ZERO_MISMATCH: return "mismatch between ranks";
  }
  return "unknown status";
}

const char* zero_last_error(void) { return g_last_error.c_str(); }

zero_status zero_comm_create_self(zero_comm_t** out) {
  ZERO_CHECK_ARG("zero_comm_create_self", out);
  return Guard([&] {
    *out = new zero_comm_t{std::move(zero::MakeThreadCommunicators(1)[0])};
    return Report(absl::OkStatus());
  });
}

zero_status zero_comm_create_mpi(const void* mpi_comm, zero_comm_t** out) {
  ZERO_CHECK_ARG("zero_comm_create_mpi", out);
  return Guard([&] {
    auto c = zero::MakeMpiCommunicator(mpi_comm);
    if (!c.ok()) return Report(c.status());
    *out = new zero_comm_t{std::move(*c)};
    return Report(absl::OkStatus());
  });
}

zero_status zero_comm_create_nccl(const void* mpi_comm, int32_t cuda_device,
                                  zero_comm_t** out) {
  ZERO_CHECK_ARG("zero_comm_create_nccl", out);
  return Guard([&] {
    auto c = zero::MakeNcclComm(mpi_comm, cuda_device, 300.0);
    if (!c.ok()) return Report(c.status());
    *out = new zero_comm_t{std::move(*c)};
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_set_device(zero_engine_t* engine, const char* kind,
                                   int32_t ordinal) {
  ZERO_CHECK_ARG("zero_engine_set_device", engine);
  ZERO_CHECK_ARG("zero_engine_set_device", kind);
  return Guard([&] {
    auto d = zero::MakeDevice(kind, ordinal);
    if (!d.ok()) return Report(d.status());
    return Report(engine->engine->SetDevice(std::move(*d)));
  });
}

zero_status zero_comm_create_threads(int32_t world_size, zero_comm_t** out) {
  ZERO_CHECK_ARG("zero_comm_create_threads", out);
  if (world_size < 1 || world_size > 4096) {
    g_last_error = absl::StrCat("zero_comm_create_threads: world_size ", world_size, " not in 1..4096");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    auto comms = zero::MakeThreadCommunicators(world_size);
    for (int r = 0; r < world_size; ++r) out[r] = new zero_comm_t{std::move(comms[r])};
    return Report(absl::OkStatus());
  });
}

zero_status zero_comm_rank(const zero_comm_t* comm, int32_t* rank) {
  ZERO_CHECK_ARG("zero_comm_rank", comm);
  ZERO_CHECK_ARG("zero_comm_rank", rank);
  *rank = comm->comm->rank();
  return ZERO_OK;
}

zero_status zero_comm_size(const zero_comm_t* comm, int32_t* size) {
  ZERO_CHECK_ARG("zero_comm_size", comm);
  ZERO_CHECK_ARG("zero_comm_size", size);
  *size = comm->comm->world_size();
  return ZERO_OK;
}

zero_status zero_comm_barrier(zero_comm_t* comm) {
  ZERO_CHECK_ARG("zero_comm_barrier", comm);
  return Guard([&] { return Report(comm->comm->Barrier()); });
}

zero_status zero_comm_allreduce_sum_f32(zero_comm_t* comm, float* data,
                                        size_t count) {
  ZERO_CHECK_ARG("zero_comm_allreduce_sum_f32", comm);
  if (count > 0) ZERO_CHECK_ARG("zero_comm_allreduce_sum_f32", data);
  return Guard([&] {
    return Report(comm->comm->AllReduce(data, static_cast<int64_t>(count), zero::ReduceOp::kSum));
  });
}

void zero_comm_destroy(zero_comm_t* comm) { delete comm; }

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

zero_status zero_engine_register_param(zero_engine_t* engine,
                                       const zero_param_desc* desc,
                                       int32_t* out_id) {
  ZERO_CHECK_ARG("zero_engine_register_param", engine);
  ZERO_CHECK_ARG("zero_engine_register_param", desc);
  ZERO_CHECK_ARG("zero_engine_register_param", out_id);
  ZERO_CHECK_ARG("zero_engine_register_param", desc->name);
  if (desc->struct_size < offsetof(zero_param_desc, trainable) + sizeof(int32_t)) {
    g_last_error = "zero_engine_register_param: desc->struct_size too small; use ZERO_PARAM_DESC_INIT";
    return ZERO_INVALID_ARGUMENT;
  }
  if (desc->ndim < 0 || desc->ndim > 8 || (desc->ndim > 0 && desc->shape == nullptr)) {
    g_last_error = absl::StrCat("zero_engine_register_param '", desc->name, "': ndim ", desc->ndim,
                                " needs 0..8 dims and a non-NULL shape");
    return ZERO_INVALID_ARGUMENT;
  }
  if (!ValidDType(desc->dtype)) {
    g_last_error = absl::StrCat("zero_engine_register_param '", desc->name, "': dtype ",
                                static_cast<int>(desc->dtype), " not in 0..2");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    zero::ParamSpec spec;
    spec.name = desc->name;
    spec.shape.assign(desc->shape, desc->shape + desc->ndim);
    spec.dtype = ToDType(desc->dtype);
    spec.init = desc->init;
    spec.trainable = desc->trainable != 0;
    auto id = engine->engine->RegisterParam(spec);
    if (!id.ok()) return Report(id.status());
    *out_id = *id;
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_finalize(zero_engine_t* engine) {
  ZERO_CHECK_ARG("zero_engine_finalize", engine);
  return Guard([&] { return Report(engine->engine->Finalize()); });
}

zero_status zero_engine_num_params(const zero_engine_t* engine, int32_t* count) {
  ZERO_CHECK_ARG("zero_engine_num_params", engine);
  ZERO_CHECK_ARG("zero_engine_num_params", count);
  *count = engine->engine->num_params();
  return ZERO_OK;
}

zero_status zero_engine_find_param(const zero_engine_t* engine, const char* name,
                                   int32_t* id) {
  ZERO_CHECK_ARG("zero_engine_find_param", engine);
  ZERO_CHECK_ARG("zero_engine_find_param", name);
  ZERO_CHECK_ARG("zero_engine_find_param", id);
  return Guard([&] {
    auto r = engine->engine->FindParam(name);
    if (!r.ok()) return Report(r.status());
    *id = *r;
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_param_numel(const zero_engine_t* engine, int32_t id,
                                    int64_t* numel) {
  ZERO_CHECK_ARG("zero_engine_param_numel", engine);
  ZERO_CHECK_ARG("zero_engine_param_numel", numel);
  return Guard([&] {
    auto r = engine->engine->ParamNumel(id);
    if (!r.ok()) return Report(r.status());
    *numel = *r;
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_param_info(const zero_engine_t* engine, int32_t id,
                                   zero_param_info* info) {
  ZERO_CHECK_ARG("zero_engine_param_info", engine);
  ZERO_CHECK_ARG("zero_engine_param_info", info);
  if (info->struct_size < sizeof(zero_param_info)) {
    g_last_error = "zero_engine_param_info: info->struct_size too small; use ZERO_PARAM_INFO_INIT";
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    auto r = engine->engine->ParamInfo(id);
    if (!r.ok()) return Report(r.status());
    info->name = engine->engine->ParamName(id);
    info->ndim = static_cast<int32_t>(r->shape.size());
    for (int i = 0; i < 8; ++i) info->shape[i] = i < info->ndim ? r->shape[i] : 0;
    info->dtype = static_cast<zero_dtype>(r->dtype);
    info->trainable = r->trainable ? 1 : 0;
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_gradient_accumulation_steps(const zero_engine_t* engine,
                                                    int32_t* steps) {
  ZERO_CHECK_ARG("zero_engine_gradient_accumulation_steps", engine);
  ZERO_CHECK_ARG("zero_engine_gradient_accumulation_steps", steps);
  *steps = static_cast<int32_t>(engine->engine->config().gradient_accumulation_steps);
  return ZERO_OK;
}

zero_status zero_engine_gather(zero_engine_t* engine, int32_t id, void** data) {
  ZERO_CHECK_ARG("zero_engine_gather", engine);
  ZERO_CHECK_ARG("zero_engine_gather", data);
  return Guard([&] {
    auto r = engine->engine->Gather(id);
    if (!r.ok()) return Report(r.status());
    *data = *r;
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_release(zero_engine_t* engine, int32_t id) {
  ZERO_CHECK_ARG("zero_engine_release", engine);
  return Guard([&] { return Report(engine->engine->Release(id)); });
}

zero_status zero_engine_grad_buffer(zero_engine_t* engine, int32_t id, void** grad) {
  ZERO_CHECK_ARG("zero_engine_grad_buffer", engine);
  ZERO_CHECK_ARG("zero_engine_grad_buffer", grad);
  return Guard([&] {
    auto r = engine->engine->GradBuffer(id);
    if (!r.ok()) return Report(r.status());
    *grad = *r;
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_grad_ready(zero_engine_t* engine, int32_t id) {
  ZERO_CHECK_ARG("zero_engine_grad_ready", engine);
  return Guard([&] { return Report(engine->engine->GradReady(id)); });
}

zero_status zero_engine_dtype(const zero_engine_t* engine, zero_dtype* dtype) {
  ZERO_CHECK_ARG("zero_engine_dtype", engine);
  ZERO_CHECK_ARG("zero_engine_dtype", dtype);
  *dtype = static_cast<zero_dtype>(engine->engine->config().dtype);
  return ZERO_OK;
}

zero_status zero_engine_loss_scale(const zero_engine_t* engine, double* scale) {
  ZERO_CHECK_ARG("zero_engine_loss_scale", engine);
  ZERO_CHECK_ARG("zero_engine_loss_scale", scale);
  *scale = engine->engine->loss_scale();
  return ZERO_OK;
}

zero_status zero_engine_step(zero_engine_t* engine, zero_step_info* info) {
  ZERO_CHECK_ARG("zero_engine_step", engine);
  return Guard([&] {
    auto r = engine->engine->Step();
    if (!r.ok()) return Report(r.status());
    if (info != nullptr && info->struct_size >= sizeof(zero_step_info)) {
      info->boundary = r->boundary;
      info->skipped = r->skipped;
      info->global_step = r->global_step;
      info->skipped_steps = r->skipped_steps;
      info->loss_scale = r->loss_scale;
      info->grad_norm = r->grad_norm;
      info->lr = r->lr;
    }
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_report_samples(zero_engine_t* engine, int64_t samples) {
  ZERO_CHECK_ARG("zero_engine_report_samples", engine);
  engine->engine->ReportSamples(samples);
  return ZERO_OK;
}

zero_status zero_engine_read_master(zero_engine_t* engine, int32_t id, float* out) {
  ZERO_CHECK_ARG("zero_engine_read_master", engine);
  ZERO_CHECK_ARG("zero_engine_read_master", out);
  return Guard([&] { return Report(engine->engine->ReadMaster(id, out)); });
}

zero_status zero_engine_stats(const zero_engine_t* engine, zero_stats* stats) {
  ZERO_CHECK_ARG("zero_engine_stats", engine);
  ZERO_CHECK_ARG("zero_engine_stats", stats);
  // Callers built against 1.0 pass a struct that ends at micro_step.
  if (stats->struct_size < offsetof(zero_stats, micro_step) + sizeof(int64_t)) {
    g_last_error = "zero_engine_stats: stats->struct_size too small; use ZERO_STATS_INIT";
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    zero::EngineStats s = engine->engine->Stats();
    stats->rank = s.rank;
    stats->world_size = s.world_size;
    stats->stage = s.stage;
    stats->trainable_numel = s.trainable_numel;
    stats->padded_numel = s.padded_numel;
    stats->master_bytes = s.master_bytes;
    stats->optimizer_bytes = s.optimizer_bytes;
    stats->grad_bytes = s.grad_bytes;
    stats->param_bytes = s.param_bytes;
    stats->frozen_bytes = s.frozen_bytes;
    stats->buffer_bytes = s.buffer_bytes;
    stats->live_gathered_bytes = s.live_gathered_bytes;
    stats->live_gathered_high_water = s.live_gathered_high_water;
    using K = zero::CollectiveKind;
    stats->sent_allgather = s.sent[static_cast<int>(K::kAllGather)];
    stats->sent_reduce_scatter = s.sent[static_cast<int>(K::kReduceScatter)];
    stats->sent_allreduce = s.sent[static_cast<int>(K::kAllReduce)];
    stats->sent_broadcast = s.sent[static_cast<int>(K::kBroadcast)];
    stats->sent_control = s.sent[static_cast<int>(K::kControl)];
    stats->collective_calls = s.collective_calls;
    stats->global_step = s.global_step;
    stats->skipped_steps = s.skipped_steps;
    stats->micro_step = s.micro_step;
    // Fields appended later are written only when the caller's struct has them.
    if (stats->struct_size >= offsetof(zero_stats, sent_bytes_allreduce) + sizeof(int64_t)) {
      stats->sent_bytes_allgather = s.sent_bytes[static_cast<int>(K::kAllGather)];
      stats->sent_bytes_reduce_scatter = s.sent_bytes[static_cast<int>(K::kReduceScatter)];
      stats->sent_bytes_allreduce = s.sent_bytes[static_cast<int>(K::kAllReduce)];
    }
    if (stats->struct_size >= offsetof(zero_stats, nvme_uring) + sizeof(int32_t)) {
      stats->nvme_bytes = s.nvme_bytes;
      stats->nvme_read_bytes = s.nvme_read_bytes;
      stats->nvme_write_bytes = s.nvme_write_bytes;
      stats->nvme_direct_io = s.nvme_direct_io;
      stats->nvme_uring = s.nvme_uring;
    }
    return Report(absl::OkStatus());
  });
}

void zero_engine_destroy(zero_engine_t* engine) {
  try {
    delete engine;
  } catch (...) {
  }
}

zero_status zero_engine_save(zero_engine_t* engine, const char* dir, const char* tag) {
  ZERO_CHECK_ARG("zero_engine_save", engine);
  ZERO_CHECK_ARG("zero_engine_save", dir);
  ZERO_CHECK_ARG("zero_engine_save", tag);
  return Guard([&] { return Report(engine->engine->Save(dir, tag)); });
}

zero_status zero_engine_load(zero_engine_t* engine, const char* dir, const char* tag,
                             const zero_load_options* options) {
  ZERO_CHECK_ARG("zero_engine_load", engine);
  ZERO_CHECK_ARG("zero_engine_load", dir);
  zero::ckpt::LoadOptions o;
  if (options != nullptr) {
    if (options->struct_size < offsetof(zero_load_options, load_optimizer_states) + sizeof(int32_t)) {
      g_last_error = "zero_engine_load: options->struct_size too small; use ZERO_LOAD_OPTIONS_INIT";
      return ZERO_INVALID_ARGUMENT;
    }
    o.load_optimizer_states = options->load_optimizer_states != 0;
    if (options->struct_size >= offsetof(zero_load_options, allow_missing) + sizeof(int32_t)) {
      o.allow_missing = options->allow_missing != 0;
    }
  }
  return Guard([&] {
    return Report(engine->engine->Load(dir, tag != nullptr ? tag : "", o));
  });
}

zero_status zero_checkpoint_export_safetensors(const char* dir, const char* tag,
                                               const char* out_path, zero_dtype dtype) {
  ZERO_CHECK_ARG("zero_checkpoint_export_safetensors", dir);
  ZERO_CHECK_ARG("zero_checkpoint_export_safetensors", out_path);
  if (!ValidDType(dtype)) {
    g_last_error = absl::StrCat("zero_checkpoint_export_safetensors: dtype ",
                                static_cast<int>(dtype), " not in 0..2");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    return Report(zero::ckpt::ExportSafetensors(dir, tag != nullptr ? tag : "", out_path,
                                                ToDType(dtype)));
  });
}

}  // extern "C"
