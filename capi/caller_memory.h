// The C ABI's calls over the caller's own memory (1.8): dtype conversions
// with the engine's rounding, and a gradient handed in from the caller's
// buffer in any float dtype (zero_convert, zero_engine_set_grad).
#ifndef ZERO_CAPI_CALLER_MEMORY_H_
#define ZERO_CAPI_CALLER_MEMORY_H_

#include <cstddef>

#include "absl/status/status.h"
#include "core/common/dtype.h"
#include "core/engine/engine.h"

namespace zero_capi {

// `count` elements of `src_dtype` at src -> `dst_dtype` at dst, through fp32
// with kernels/cast_math.h's rounding (the engine's own).
void Convert(zero::DType dst_dtype, void* dst, zero::DType src_dtype, const void* src,
             size_t count);

// Param `id`'s gradient buffer set from `bytes` of `dtype` at host `src`
// (converted to the param's dtype), then handed over (GradReady).
absl::Status SetGrad(zero::Engine* engine, int id, zero::DType dtype, const void* src,
                     size_t bytes);

}  // namespace zero_capi

#endif  // ZERO_CAPI_CALLER_MEMORY_H_
