// zero_param_desc (C) -> zero::ParamSpec (C++): the checks of the caller's
// struct that engine registration (zero_engine_register_param*) and the
// memory estimate of described params (zero_estimate_memory_params) share,
// so both refuse the same descriptions with the same words.
#ifndef ZERO_CAPI_PARAM_DESC_H_
#define ZERO_CAPI_PARAM_DESC_H_

#include "core/engine/param_registry.h"
#include "zero_c.h"

namespace zero_capi {

// Reads `desc` (struct_size rule of zero_c.h convention 3), checks its
// name, ndim/shape, dtype and use_muon, and fills `spec` (init: desc->init;
// the caller adds any other init source). ZERO_OK, or an error whose message
// (zero_last_error) begins with `call` and names the param.
zero_status ReadParamDesc(const char* call, const zero_param_desc* desc, zero::ParamSpec* spec);

}  // namespace zero_capi

#endif  // ZERO_CAPI_PARAM_DESC_H_
