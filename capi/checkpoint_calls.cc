// The C ABI's checkpoint calls: save (synchronous or async, keep_last), load,
// preemption saves, pretrained safetensors, and the offline export and
// reshard of a checkpoint directory.
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/abi_struct.h"
#include "capi/call_support.h"
#include "core/ckpt/reshard.h"
#include "core/ckpt/safetensors.h"
#include "core/common/progress.h"
#include "core/engine/engine.h"
#include "zero_c.h"

namespace {

using zero_capi::BadStruct;
using zero_capi::EnumValue;
using zero_capi::Guard;
using zero_capi::LastError;
using zero_capi::Null;
using zero_capi::ReadStruct;
using zero_capi::Report;
using zero_capi::ToDType;
using zero_capi::ValidDType;
using zero_capi::WrapProgress;

constexpr zero_load_options kLoadOptionsDefaults = ZERO_LOAD_OPTIONS_INIT;
constexpr zero_safetensors_options kSafetensorsOptionsDefaults = ZERO_SAFETENSORS_OPTIONS_INIT;
constexpr zero_save_options kSaveOptionsDefaults = ZERO_SAVE_OPTIONS_INIT;
constexpr zero_preemption_options kPreemptionOptionsDefaults = ZERO_PREEMPTION_OPTIONS_INIT;

zero_status ExportSafetensors(const char* call, const char* dir, const char* tag,
                              const char* out_path, zero_dtype dtype,
                              zero::ProgressCallback progress) {
  ZERO_CHECK_ARG(call, dir);
  ZERO_CHECK_ARG(call, out_path);
  const int64_t dt = EnumValue(dtype);
  if (!ValidDType(dt)) {
    LastError() = absl::StrCat(call, ": dtype ", dt, " not in 0..2");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    return Report(zero::ckpt::ExportSafetensors(dir, tag != nullptr ? tag : "", out_path,
                                                ToDType(dt),
                                                zero::ProgressFor(std::move(progress), "export")));
  });
}


}  // namespace

extern "C" {

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
      LastError() = absl::StrCat("zero_engine_save_with: keep_last ", read->keep_last,
                                  " is negative");
      return ZERO_INVALID_ARGUMENT;
    }
    o.async = read->asynchronous != 0;
    o.keep_last = read->keep_last;
    o.exclude_frozen = read->exclude_frozen != 0;
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

zero_status zero_checkpoint_export_safetensors(const char* dir, const char* tag,
                                               const char* out_path, zero_dtype dtype) {
  return ExportSafetensors("zero_checkpoint_export_safetensors", dir, tag, out_path, dtype,
                           nullptr);
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

}  // extern "C"
