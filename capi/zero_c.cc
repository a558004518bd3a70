// The C ABI over the C++ core: the one place where absl::Status and C++
// exceptions become zero_status codes plus a thread-local message
// (capi/call_support.h), the version, and the engine's params, gradients and
// steps. The other calls live in files named for them: comm_calls.cc,
// config_calls.cc, device_calls.cc, observe_calls.cc, checkpoint_calls.cc,
// estimate_calls.cc and caller_memory.cc; a param description's checks in
// param_desc.cc.
#include "zero_c.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/abi_struct.h"
#include "capi/call_support.h"
#include "capi/caller_memory.h"
#include "capi/param_desc.h"
#include "capi/status_code.h"
#include "core/engine/engine.h"
#include "core/estimate/memory_estimate.h"
#include "core/optim/lr_schedule.h"

namespace zero_capi {

std::string& LastError() {
  thread_local std::string message;
  return message;
}

zero_status Report(const absl::Status& s) {
  if (s.ok()) {
    LastError().clear();
    return ZERO_OK;
  }
  LastError() = std::string(s.message());
  return ToZeroStatus(s);
}

zero_status BadStruct(const char* call, const absl::Status& s) {
  LastError() = absl::StrCat(call, ": ", s.message());
  return ZERO_INVALID_ARGUMENT;
}

zero_status Null(const char* call, const char* what) {
  LastError() = absl::StrCat(call, ": ", what, " is NULL");
  return ZERO_INVALID_ARGUMENT;
}

}  // namespace zero_capi

namespace {

using zero_capi::BadStruct;
using zero_capi::CheckStructSize;
using zero_capi::EnumValue;
using zero_capi::Guard;
using zero_capi::LastError;
using zero_capi::Null;
using zero_capi::ReadParamDesc;
using zero_capi::ReadStruct;
using zero_capi::Report;
using zero_capi::ToDType;
using zero_capi::ValidDType;
using zero_capi::WriteStruct;
using zero_capi::WrapProgress;
using zero_capi::ZeroStruct;

constexpr zero_init_spec kInitSpecDefaults = ZERO_INIT_SPEC_INIT;

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

const char* zero_last_error(void) { return LastError().c_str(); }

namespace {

zero_status RegisterParam(const char* call, zero_engine_t* engine,
                          const zero_param_desc* desc, const zero::InitSpec* init_spec,
                          zero_fill_fn fill, void* user, int32_t* out_id) {
  ZERO_CHECK_ARG(call, engine);
  if (desc == nullptr) return Null(call, "desc");
  ZERO_CHECK_ARG(call, out_id);
  zero::ParamSpec spec;
  const zero_status read = ReadParamDesc(call, desc, &spec);
  if (read != ZERO_OK) return read;
  if ((init_spec != nullptr || fill != nullptr) && spec.init != nullptr) {
    LastError() = absl::StrCat(call, " '", spec.name,
                                "': desc->init must be NULL (one init source)");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    spec.init_spec = init_spec;
    spec.fill = fill;
    spec.fill_user = user;
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
    LastError() = absl::StrCat(call, ": spec kind ", kind, " not in 0..7");
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
    LastError() = absl::StrCat("zero_engine_gather_into: dtype ", dt, " is not a zero_dtype");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] { return Report(engine->engine->GatherInto(id, ToDType(dt), dst, bytes)); });
}

zero_status zero_engine_release(zero_engine_t* engine, int32_t id) {
  ZERO_CHECK_ARG("zero_engine_release", engine);
  return Guard([&] { return Report(engine->engine->Release(id)); });
}

zero_status zero_engine_gather_into_many(zero_engine_t* engine, const int32_t* ids, size_t count,
                                         zero_dtype dtype, void* const* dsts,
                                         const size_t* bytes) {
  static constexpr char kCall[] = "zero_engine_gather_into_many";
  ZERO_CHECK_ARG(kCall, engine);
  if (count > 0) {
    ZERO_CHECK_ARG(kCall, ids);
    ZERO_CHECK_ARG(kCall, dsts);
    ZERO_CHECK_ARG(kCall, bytes);
  }
  const int64_t dt = EnumValue(dtype);
  if (!ValidDType(dt)) {
    LastError() = absl::StrCat(kCall, ": dtype ", dt, " is not a zero_dtype");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    return Report(engine->engine->GatherIntoMany(ids, count, ToDType(dt), dsts, bytes));
  });
}

zero_status zero_engine_release_many(zero_engine_t* engine, const int32_t* ids, size_t count) {
  ZERO_CHECK_ARG("zero_engine_release_many", engine);
  if (count > 0) ZERO_CHECK_ARG("zero_engine_release_many", ids);
  return Guard([&] { return Report(engine->engine->ReleaseMany(ids, count)); });
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

void zero_engine_destroy(zero_engine_t* engine) {
  try {
    delete engine;
  } catch (...) {
  }
}

// ---- 1.6: progress ----------------------------------------------------------

zero_status zero_engine_set_progress(zero_engine_t* engine, zero_progress_fn fn, void* user) {
  ZERO_CHECK_ARG("zero_engine_set_progress", engine);
  return Guard([&] {
    engine->engine->set_progress(WrapProgress(fn, user));
    return Report(absl::OkStatus());
  });
}

// ---- 1.8: conversions and gradients from the caller's memory ----------------

zero_status zero_convert(zero_dtype dst_dtype, void* dst, zero_dtype src_dtype, const void* src,
                         size_t count) {
  const int64_t dt = EnumValue(dst_dtype), st = EnumValue(src_dtype);
  if (!ValidDType(dt) || !ValidDType(st)) {
    LastError() = absl::StrCat("zero_convert: dtype ", ValidDType(dt) ? st : dt,
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
    LastError() = absl::StrCat("zero_engine_set_grad: dtype ", dt, " is not a zero_dtype");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    return Report(zero_capi::SetGrad(engine->engine.get(), id, ToDType(dt), src, bytes));
  });
}

}  // extern "C"
