// The C ABI over the C++ core: the one place where absl::Status and C++
// exceptions become zero_status codes plus a thread-local message.
#include "zero_c.h"

#include <cstring>
#include <exception>
#include <type_traits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "capi/abi_struct.h"
#include "capi/caller_memory.h"
#include "capi/status_code.h"
#include "core/ckpt/reshard.h"
#include "core/ckpt/safetensors.h"
#include "core/comm/mpi_communicator.h"
#include "core/comm/thread_communicator.h"
#include "core/config/config.h"
#include "core/backend/device_factory.h"
#include "core/engine/engine.h"
#include "core/estimate/memory_estimate.h"
#include "core/optim/lr_schedule.h"

struct zero_comm_t {
  std::unique_ptr<zero::Communicator> comm;
};

struct zero_engine_t {
  std::unique_ptr<zero::Engine> engine;
};

namespace {

using zero_capi::CheckStructSize;
using zero_capi::ReadStruct;
using zero_capi::WriteStruct;
using zero_capi::ZeroStruct;

thread_local std::string g_last_error;

zero_status Report(const absl::Status& s) {
  if (s.ok()) {
    g_last_error.clear();
    return ZERO_OK;
  }
  g_last_error = std::string(s.message());
  return zero_capi::ToZeroStatus(s);
}

// A struct_size refused by the rule of zero_c.h convention 3, as `call`'s
// error ("call: zero_stats: struct_size 8 is smaller than ...").
zero_status BadStruct(const char* call, const absl::Status& s) {
  g_last_error = absl::StrCat(call, ": ", s.message());
  return ZERO_INVALID_ARGUMENT;
}

constexpr zero_config kConfigDefaults = ZERO_CONFIG_INIT;
constexpr zero_param_desc kParamDescDefaults = ZERO_PARAM_DESC_INIT;
constexpr zero_init_spec kInitSpecDefaults = ZERO_INIT_SPEC_INIT;
constexpr zero_load_options kLoadOptionsDefaults = ZERO_LOAD_OPTIONS_INIT;
constexpr zero_safetensors_options kSafetensorsOptionsDefaults = ZERO_SAFETENSORS_OPTIONS_INIT;
constexpr zero_save_options kSaveOptionsDefaults = ZERO_SAVE_OPTIONS_INIT;
constexpr zero_preemption_options kPreemptionOptionsDefaults = ZERO_PREEMPTION_OPTIONS_INIT;

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

// A C enum's value as the integer the caller stored. A C caller may store
// any int in a zero_dtype; C++ loading one outside the enumerators' range as
// the enum type is undefined behaviour (UBSan's -fsanitize=enum), so every
// enum the caller hands in is read through its bytes and range-checked as an
// integer before it is used as the enum (//tests:enum_range_c_test).
template <typename E>
int64_t EnumValue(const E& e) {
  static_assert(std::is_enum<E>::value, "EnumValue reads enums");
  std::make_signed_t<std::underlying_type_t<E>> v;
  static_assert(sizeof v == sizeof e, "an enum's underlying type");
  std::memcpy(&v, &e, sizeof v);
  return v;
}

bool ValidDType(int64_t t) { return t >= ZERO_DTYPE_F32 && t <= ZERO_DTYPE_BF16; }

// Only after ValidDType.
zero::DType ToDType(int64_t t) { return static_cast<zero::DType>(t); }

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
    default:
      return absl::InvalidArgumentError(absl::StrCat("zero_config.optimizer: expected 0..2, got ", optimizer));
  }
  auto f = [](float v, double* out) { if (v >= 0.0f) *out = v; };
  auto i64 = [](int64_t v, int64_t* out) { if (v >= 0) *out = v; };
  f(c->lr, &k.lr);
  f(c->beta1, &k.beta1);
  f(c->beta2, &k.beta2);
  f(c->eps, &k.eps);
  f(c->weight_decay, &k.weight_decay);
  f(c->momentum, &k.momentum);
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

int32_t zero_version(void) { return ZERO_VERSION_CODE; }

const char* zero_status_string(zero_status status) {
  switch (EnumValue(status)) {
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
    case ZERO_CANCELLED: return "cancelled by a progress callback";
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

zero_status zero_comm_broadcast(zero_comm_t* comm, void* data, size_t bytes, int32_t root) {
  ZERO_CHECK_ARG("zero_comm_broadcast", comm);
  if (bytes > 0) ZERO_CHECK_ARG("zero_comm_broadcast", data);
  return Guard([&] {
    if (root < 0 || root >= comm->comm->world_size()) {
      return Report(absl::InvalidArgumentError(absl::StrCat(
          "zero_comm_broadcast: root ", root, " is not a rank of a world of ",
          comm->comm->world_size())));
    }
    return Report(comm->comm->Broadcast(data, static_cast<int64_t>(bytes), root));
  });
}

void zero_comm_abort(zero_comm_t* comm, const char* reason) {
  if (comm == nullptr) return;
  comm->comm->Abort(reason != nullptr ? reason : "aborted");
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

namespace {

zero_status RegisterParam(const char* call, zero_engine_t* engine,
                          const zero_param_desc* desc_in, const zero::InitSpec* init_spec,
                          zero_fill_fn fill, void* user, int32_t* out_id) {
  ZERO_CHECK_ARG(call, engine);
  if (desc_in == nullptr) return Null(call, "desc");
  ZERO_CHECK_ARG(call, out_id);
  auto read = ReadStruct(desc_in, kParamDescDefaults);
  if (!read.ok()) return BadStruct(call, read.status());
  const zero_param_desc* desc = &*read;
  ZERO_CHECK_ARG(call, desc->name);
  if ((init_spec != nullptr || fill != nullptr) && desc->init != nullptr) {
    g_last_error = absl::StrCat(call, " '", desc->name,
                                "': desc->init must be NULL (one init source)");
    return ZERO_INVALID_ARGUMENT;
  }
  if (desc->ndim < 0 || desc->ndim > ZERO_MAX_DIMS || (desc->ndim > 0 && desc->shape == nullptr)) {
    g_last_error = absl::StrCat(call, " '", desc->name, "': ndim ", desc->ndim,
                                " needs 0..", ZERO_MAX_DIMS, " dims and a non-NULL shape");
    return ZERO_INVALID_ARGUMENT;
  }
  const int64_t dtype = EnumValue(desc->dtype);
  if (!ValidDType(dtype)) {
    g_last_error = absl::StrCat(call, " '", desc->name, "': dtype ", dtype, " not in 0..2");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    zero::ParamSpec spec;
    spec.name = desc->name;
    spec.shape.assign(desc->shape, desc->shape + desc->ndim);
    spec.dtype = ToDType(dtype);
    spec.init = desc->init;
    spec.init_spec = init_spec;
    spec.fill = fill;
    spec.fill_user = user;
    spec.trainable = desc->trainable != 0;
    auto id = engine->engine->RegisterParam(spec);
    if (!id.ok()) return Report(id.status());
    *out_id = *id;
    return Report(absl::OkStatus());
  });
}

}  // namespace

zero_status zero_engine_register_param(zero_engine_t* engine, const zero_param_desc* desc,
                                       int32_t* out_id) {
  return RegisterParam("zero_engine_register_param", engine, desc, nullptr, nullptr, nullptr,
                       out_id);
}

zero_status zero_engine_register_param_init(zero_engine_t* engine, const zero_param_desc* desc,
                                            const zero_init_spec* spec_in, int32_t* out_id) {
  const char* call = "zero_engine_register_param_init";
  if (spec_in == nullptr) return Null(call, "spec");
  auto read = ReadStruct(spec_in, kInitSpecDefaults);
  if (!read.ok()) return BadStruct(call, read.status());
  const int64_t kind = EnumValue(read->kind);
  if (kind < ZERO_INIT_ZEROS || kind > ZERO_INIT_FAN_IN_UNIFORM) {
    g_last_error = absl::StrCat(call, ": spec kind ", kind, " not in 0..7");
    return ZERO_INVALID_ARGUMENT;
  }
  zero::InitSpec s;
  s.kind = static_cast<zero::InitKind>(kind);
  s.seed = read->seed;
  s.value = read->value;
  s.low = read->low;
  s.high = read->high;
  s.mean = read->mean;
  s.std = read->std;
  s.a = read->a;
  s.fan_in = read->fan_in;
  return RegisterParam(call, engine, desc, &s, nullptr, nullptr, out_id);
}

zero_status zero_engine_register_param_fill(zero_engine_t* engine, const zero_param_desc* desc,
                                            zero_fill_fn fill, void* user, int32_t* out_id) {
  const char* call = "zero_engine_register_param_fill";
  if (fill == nullptr) return Null(call, "fill");
  return RegisterParam(call, engine, desc, nullptr, fill, user, out_id);
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
  absl::Status size_ok = CheckStructSize(info);
  if (!size_ok.ok()) return BadStruct("zero_engine_param_info", size_ok);
  return Guard([&] {
    auto r = engine->engine->ParamInfo(id);
    if (!r.ok()) return Report(r.status());
    if (r->shape.size() > ZERO_MAX_DIMS) {
      return Report(absl::InternalError(absl::StrCat(
          "zero_engine_param_info: param ", id, " has ", r->shape.size(), " dims, over ZERO_MAX_DIMS")));
    }
    zero_param_info out = ZeroStruct<zero_param_info>();
    out.name = engine->engine->ParamName(id);
    out.ndim = static_cast<int32_t>(r->shape.size());
    for (int i = 0; i < out.ndim; ++i) out.shape[i] = r->shape[i];
    out.dtype = static_cast<zero_dtype>(r->dtype);
    out.trainable = r->trainable ? 1 : 0;
    WriteStruct(out, info);
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

zero_status zero_engine_gather_into(zero_engine_t* engine, int32_t id, zero_dtype dtype,
                                    void* dst, size_t bytes) {
  ZERO_CHECK_ARG("zero_engine_gather_into", engine);
  ZERO_CHECK_ARG("zero_engine_gather_into", dst);
  const int64_t dt = EnumValue(dtype);
  if (!ValidDType(dt)) {
    g_last_error = absl::StrCat("zero_engine_gather_into: dtype ", dt, " is not a zero_dtype");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] { return Report(engine->engine->GatherInto(id, ToDType(dt), dst, bytes)); });
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

zero_status zero_engine_lr_for_step(const zero_engine_t* engine, int64_t step, double* lr) {
  ZERO_CHECK_ARG("zero_engine_lr_for_step", engine);
  ZERO_CHECK_ARG("zero_engine_lr_for_step", lr);
  if (step < 0) {
    return Report(absl::InvalidArgumentError(
        absl::StrCat("zero_engine_lr_for_step: step ", step, " is negative (0 is the first)")));
  }
  // The schedule the optimizer boundary builds from the same config.
  *lr = zero::LrSchedule(engine->engine->config()).LrForStep(step);
  return ZERO_OK;
}

zero_status zero_engine_step(zero_engine_t* engine, zero_step_info* info) {
  ZERO_CHECK_ARG("zero_engine_step", engine);
  if (info != nullptr) {
    // Before the (collective) step, so a refused struct changes nothing.
    absl::Status size_ok = CheckStructSize(info);
    if (!size_ok.ok()) return BadStruct("zero_engine_step", size_ok);
  }
  return Guard([&] {
    auto r = engine->engine->Step();
    if (!r.ok()) return Report(r.status());
    if (info != nullptr) {
      zero_step_info out = ZeroStruct<zero_step_info>();
      out.boundary = r->boundary;
      out.skipped = r->skipped;
      out.global_step = r->global_step;
      out.skipped_steps = r->skipped_steps;
      out.loss_scale = r->loss_scale;
      out.grad_norm = r->grad_norm;
      out.lr = r->lr;
      WriteStruct(out, info);
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

zero_status zero_engine_write_master(zero_engine_t* engine, int32_t id, const float* values) {
  ZERO_CHECK_ARG("zero_engine_write_master", engine);
  ZERO_CHECK_ARG("zero_engine_write_master", values);
  return Guard([&] { return Report(engine->engine->WriteMaster(id, values)); });
}

zero_status zero_engine_write_master_range(zero_engine_t* engine, int32_t id, int64_t offset,
                                           int64_t count, const float* values) {
  ZERO_CHECK_ARG("zero_engine_write_master_range", engine);
  ZERO_CHECK_ARG("zero_engine_write_master_range", values);
  return Guard([&] {
    return Report(engine->engine->WriteMasterRange(id, offset, count, values));
  });
}

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
    auto e = zero::EstimateMemory(ps, *cfg, {ranks_per_node, nodes, gpu != 0});
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

zero_status zero_engine_save_with(zero_engine_t* engine, const char* dir, const char* tag,
                                  const zero_save_options* options) {
  ZERO_CHECK_ARG("zero_engine_save_with", engine);
  ZERO_CHECK_ARG("zero_engine_save_with", dir);
  ZERO_CHECK_ARG("zero_engine_save_with", tag);
  zero::ckpt::SaveOptions o;
  if (options != nullptr) {
    auto read = ReadStruct(options, kSaveOptionsDefaults);
    if (!read.ok()) return BadStruct("zero_engine_save_with", read.status());
    if (read->keep_last < 0) {
      g_last_error = absl::StrCat("zero_engine_save_with: keep_last ", read->keep_last,
                                  " is negative");
      return ZERO_INVALID_ARGUMENT;
    }
    o.async = read->asynchronous != 0;
    o.keep_last = read->keep_last;
  }
  return Guard([&] { return Report(engine->engine->Save(dir, tag, o)); });
}

zero_status zero_engine_wait_checkpoint(zero_engine_t* engine) {
  ZERO_CHECK_ARG("zero_engine_wait_checkpoint", engine);
  return Guard([&] { return Report(engine->engine->WaitForCheckpoint()); });
}

zero_status zero_engine_set_preemption(zero_engine_t* engine,
                                       const zero_preemption_options* options) {
  ZERO_CHECK_ARG("zero_engine_set_preemption", engine);
  if (options == nullptr) {
    return Guard([&] { return Report(engine->engine->SetPreemption(nullptr)); });
  }
  auto read = ReadStruct(options, kPreemptionOptionsDefaults);
  if (!read.ok()) return BadStruct("zero_engine_set_preemption", read.status());
  if (read->dir == nullptr) return Null("zero_engine_set_preemption", "options->dir");
  zero::PreemptionOptions o;
  o.signal = read->signal;
  o.dir = read->dir;
  if (read->tag != nullptr) o.tag = read->tag;
  o.exit = read->exit != 0;
  o.exit_code = read->exit_code;
  return Guard([&] { return Report(engine->engine->SetPreemption(&o)); });
}

zero_status zero_engine_load(zero_engine_t* engine, const char* dir, const char* tag,
                             const zero_load_options* options) {
  ZERO_CHECK_ARG("zero_engine_load", engine);
  ZERO_CHECK_ARG("zero_engine_load", dir);
  zero::ckpt::LoadOptions o;
  if (options != nullptr) {
    auto read = ReadStruct(options, kLoadOptionsDefaults);
    if (!read.ok()) return BadStruct("zero_engine_load", read.status());
    o.load_optimizer_states = read->load_optimizer_states != 0;
    o.allow_missing = read->allow_missing != 0;
  }
  return Guard([&] {
    return Report(engine->engine->Load(dir, tag != nullptr ? tag : "", o));
  });
}

zero_status zero_engine_load_safetensors(zero_engine_t* engine, const char* path,
                                         const zero_safetensors_options* options) {
  ZERO_CHECK_ARG("zero_engine_load_safetensors", engine);
  ZERO_CHECK_ARG("zero_engine_load_safetensors", path);
  zero::PretrainedOptions o;
  int64_t* bytes_read = nullptr;
  if (options != nullptr) {
    auto read = ReadStruct(options, kSafetensorsOptionsDefaults);
    if (!read.ok()) return BadStruct("zero_engine_load_safetensors", read.status());
    o.allow_missing = read->allow_missing != 0;
    if (read->prefix_strip != nullptr) o.prefix_strip = read->prefix_strip;
    if (read->prefix_add != nullptr) o.prefix_add = read->prefix_add;
    bytes_read = read->bytes_read;
  }
  return Guard([&] {
    zero::PretrainedStats stats;
    zero_status st = Report(engine->engine->LoadSafetensors(path, o, &stats));
    if (st == ZERO_OK && bytes_read != nullptr) *bytes_read = stats.bytes_read;
    return st;
  });
}

namespace {

// The C progress callback as the core's; empty when fn is null. A nonzero
// return cancels.
zero::ProgressCallback WrapProgress(zero_progress_fn fn, void* user) {
  if (fn == nullptr) return nullptr;
  return [fn, user](const char* what, int64_t done, int64_t total) {
    return fn(user, what, done, total) == 0;
  };
}

zero_status ExportSafetensors(const char* call, const char* dir, const char* tag,
                              const char* out_path, zero_dtype dtype,
                              zero::ProgressCallback progress) {
  ZERO_CHECK_ARG(call, dir);
  ZERO_CHECK_ARG(call, out_path);
  const int64_t dt = EnumValue(dtype);
  if (!ValidDType(dt)) {
    g_last_error = absl::StrCat(call, ": dtype ", dt, " not in 0..2");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    return Report(zero::ckpt::ExportSafetensors(dir, tag != nullptr ? tag : "", out_path,
                                                ToDType(dt),
                                                zero::ProgressFor(std::move(progress), "export")));
  });
}

}  // namespace

zero_status zero_checkpoint_export_safetensors(const char* dir, const char* tag,
                                               const char* out_path, zero_dtype dtype) {
  return ExportSafetensors("zero_checkpoint_export_safetensors", dir, tag, out_path, dtype,
                           nullptr);
}

zero_status zero_engine_device(const zero_engine_t* engine, zero_device_info* info) {
  ZERO_CHECK_ARG("zero_engine_device", engine);
  ZERO_CHECK_ARG("zero_engine_device", info);
  absl::Status size_ok = CheckStructSize(info);
  if (!size_ok.ok()) return BadStruct("zero_engine_device", size_ok);
  return Guard([&] {
    const zero::Device* d = engine->engine->device();
    const std::string name = d->name();  // "cpu", "standin", "cuda:N"
    zero_device_info out = ZeroStruct<zero_device_info>();
    out.host_accessible = d->host_accessible() ? 1 : 0;
    const zero::DeviceMemoryStats m = d->memory_stats();
    out.device_bytes = m.bytes;
    out.device_peak_bytes = m.peak_bytes;
    out.device_reserved_bytes = m.reserved_bytes;
    out.pinned_host_bytes = m.pinned_host_bytes;
    if (name == "cpu") {
      out.kind = ZERO_DEVICE_CPU;
      out.dlpack_device_type = 1;  // kDLCPU
    } else if (name == "standin") {
      out.kind = ZERO_DEVICE_STANDIN;
      out.dlpack_device_type = 12;  // kDLExtDev: no framework may read it as host memory
    } else if (absl::StartsWith(name, "cuda:")) {
      out.kind = ZERO_DEVICE_CUDA;
      out.dlpack_device_type = 2;  // kDLCUDA
      int ordinal = 0;
      if (!absl::SimpleAtoi(name.substr(5), &ordinal)) {
        return Report(absl::InternalError(absl::StrCat("device name '", name, "'")));
      }
      out.ordinal = ordinal;
    } else {
      return Report(absl::InternalError(absl::StrCat("zero_engine_device: unknown device '", name, "'")));
    }
    WriteStruct(out, info);
    return Report(absl::OkStatus());
  });
}

zero_status zero_engine_copy(zero_engine_t* engine, void* dst, const void* src,
                             size_t bytes) {
  ZERO_CHECK_ARG("zero_engine_copy", engine);
  return Guard([&] { return Report(engine->engine->CopyMemory(dst, src, bytes)); });
}

// ---- 1.6: progress ----------------------------------------------------------

zero_status zero_engine_set_progress(zero_engine_t* engine, zero_progress_fn fn, void* user) {
  ZERO_CHECK_ARG("zero_engine_set_progress", engine);
  return Guard([&] {
    engine->engine->set_progress(WrapProgress(fn, user));
    return Report(absl::OkStatus());
  });
}

zero_status zero_checkpoint_export_safetensors_progress(const char* dir, const char* tag,
                                                        const char* out_path, zero_dtype dtype,
                                                        zero_progress_fn fn, void* user) {
  return ExportSafetensors("zero_checkpoint_export_safetensors_progress", dir, tag, out_path,
                           dtype, WrapProgress(fn, user));
}

zero_status zero_checkpoint_reshard(const char* dir, const char* tag, const char* out_dir,
                                    int32_t world, zero_progress_fn fn, void* user) {
  ZERO_CHECK_ARG("zero_checkpoint_reshard", dir);
  ZERO_CHECK_ARG("zero_checkpoint_reshard", out_dir);
  return Guard([&] {
    return Report(zero::ckpt::ReshardCheckpoint(dir, tag != nullptr ? tag : "", out_dir, world,
                                                zero::ProgressFor(WrapProgress(fn, user),
                                                                  "reshard")));
  });
}

// ---- 1.8: conversions and gradients from the caller's memory ----------------

zero_status zero_convert(zero_dtype dst_dtype, void* dst, zero_dtype src_dtype, const void* src,
                         size_t count) {
  const int64_t dt = EnumValue(dst_dtype), st = EnumValue(src_dtype);
  if (!ValidDType(dt) || !ValidDType(st)) {
    g_last_error = absl::StrCat("zero_convert: dtype ", ValidDType(dt) ? st : dt,
                                " is not a zero_dtype");
    return ZERO_INVALID_ARGUMENT;
  }
  if (count == 0) return Report(absl::OkStatus());
  ZERO_CHECK_ARG("zero_convert", dst);
  ZERO_CHECK_ARG("zero_convert", src);
  zero_capi::Convert(ToDType(dt), dst, ToDType(st), src, count);
  return Report(absl::OkStatus());
}

zero_status zero_engine_set_grad(zero_engine_t* engine, int32_t id, zero_dtype dtype,
                                 const void* src, size_t bytes) {
  ZERO_CHECK_ARG("zero_engine_set_grad", engine);
  ZERO_CHECK_ARG("zero_engine_set_grad", src);
  const int64_t dt = EnumValue(dtype);
  if (!ValidDType(dt)) {
    g_last_error = absl::StrCat("zero_engine_set_grad: dtype ", dt, " is not a zero_dtype");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    return Report(zero_capi::SetGrad(engine->engine.get(), id, ToDType(dt), src, bytes));
  });
}

}  // extern "C"
