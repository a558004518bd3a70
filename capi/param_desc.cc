#include "capi/param_desc.h"

#include "absl/strings/str_cat.h"
#include "capi/abi_struct.h"
#include "capi/call_support.h"

namespace zero_capi {
namespace {

constexpr zero_param_desc kParamDescDefaults = ZERO_PARAM_DESC_INIT;

}  // namespace

zero_status ReadParamDesc(const char* call, const zero_param_desc* desc_in,
                          zero::ParamSpec* spec) {
  if (desc_in == nullptr) return Null(call, "desc");
  auto read = ReadStruct(desc_in, kParamDescDefaults);
  if (!read.ok()) return BadStruct(call, read.status());
  const zero_param_desc* desc = &*read;
  ZERO_CHECK_ARG(call, desc->name);
  if (desc->ndim < 0 || desc->ndim > ZERO_MAX_DIMS || (desc->ndim > 0 && desc->shape == nullptr)) {
    LastError() = absl::StrCat(call, " '", desc->name, "': ndim ", desc->ndim,
                                " needs 0..", ZERO_MAX_DIMS, " dims and a non-NULL shape");
    return ZERO_INVALID_ARGUMENT;
  }
  const int64_t dtype = EnumValue(desc->dtype);
  if (!ValidDType(dtype)) {
    LastError() = absl::StrCat(call, " '", desc->name, "': dtype ", dtype, " not in 0..2");
    return ZERO_INVALID_ARGUMENT;
  }
  const int64_t use_muon = EnumValue(desc->use_muon);
  if (use_muon < ZERO_MUON_AUTO || use_muon > ZERO_MUON_OFF) {
    LastError() = absl::StrCat(call, " '", desc->name, "': use_muon ", use_muon, " not in 0..2");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    spec->name = desc->name;
    spec->shape.assign(desc->shape, desc->shape + desc->ndim);
    spec->dtype = ToDType(dtype);
    spec->init = desc->init;
    spec->trainable = desc->trainable != 0;
    spec->use_muon = use_muon == ZERO_MUON_AUTO ? -1 : use_muon == ZERO_MUON_ON ? 1 : 0;
    return ZERO_OK;
  });
}

}  // namespace zero_capi
