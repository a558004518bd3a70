// The C ABI's device calls: which device holds the engine's state, what it
// holds, and copies to and from it.
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "capi/abi_struct.h"
#include "capi/call_support.h"
#include "core/backend/device_factory.h"
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

}  // extern "C"
