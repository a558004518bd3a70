#include "capi/caller_memory.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/engine/param_registry.h"
#include "kernels/cast_math.h"

namespace zero_capi {
namespace {

using zero::DType;

struct F32 {
  using T = float;
  static float Load(T v) { return v; }
  static T Store(float f) { return f; }
};
struct F16 {
  using T = uint16_t;
  static float Load(T v) { return zero::math::HalfToFloat(v); }
  static T Store(float f) { return zero::math::FloatToHalf(f); }
};
struct BF16 {
  using T = uint16_t;
  static float Load(T v) { return zero::math::Bf16ToFloat(v); }
  static T Store(float f) { return zero::math::FloatToBf16(f); }
};

template <typename D, typename S>
void ConvertAs(void* dst, const void* src, size_t count) {
  auto* d = static_cast<typename D::T*>(dst);
  const auto* s = static_cast<const typename S::T*>(src);
  for (size_t i = 0; i < count; ++i) d[i] = D::Store(S::Load(s[i]));
}

template <typename D>
void ConvertFrom(DType src_dtype, void* dst, const void* src, size_t count) {
  switch (src_dtype) {
    case DType::kF32: return ConvertAs<D, F32>(dst, src, count);
    case DType::kF16: return ConvertAs<D, F16>(dst, src, count);
    case DType::kBF16: return ConvertAs<D, BF16>(dst, src, count);
  }
}

}  // namespace

void Convert(DType dst_dtype, void* dst, DType src_dtype, const void* src, size_t count) {
  if (dst_dtype == src_dtype) {
    if (dst != src) std::memmove(dst, src, count * zero::DTypeSize(dst_dtype));
    return;
  }
  switch (dst_dtype) {
    case DType::kF32: return ConvertFrom<F32>(src_dtype, dst, src, count);
    case DType::kF16: return ConvertFrom<F16>(src_dtype, dst, src, count);
    case DType::kBF16: return ConvertFrom<BF16>(src_dtype, dst, src, count);
  }
}

absl::Status SetGrad(zero::Engine* engine, int id, DType dtype, const void* src, size_t bytes) {
  ASSIGN_OR_RETURN(zero::ParamSpec info, engine->ParamInfo(id));
  int64_t numel = 1;
  for (int64_t d : info.shape) numel *= d;
  const size_t want = static_cast<size_t>(numel) * zero::DTypeSize(dtype);
  if (bytes != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "set_grad '", engine->ParamName(id), "': ", bytes, " bytes given; its ", numel, " ",
        zero::DTypeName(dtype), " elements (shape ", zero::ShapeText(info.shape), ", a ",
        zero::DTypeName(info.dtype), " param) take ", want));
  }
  ASSIGN_OR_RETURN(void* grad, engine->GradBuffer(id));
  if (engine->device()->host_accessible()) {
    Convert(info.dtype, grad, dtype, src, static_cast<size_t>(numel));
  } else {
    // Rounded on the host with the same functions the device's kernels use
    // (kernels/cast_math.h), then uploaded.
    std::vector<char> staged(static_cast<size_t>(numel) * zero::DTypeSize(info.dtype));
    Convert(info.dtype, staged.data(), dtype, src, static_cast<size_t>(numel));
    RETURN_IF_ERROR(engine->CopyMemory(grad, staged.data(), staged.size()));
  }
  return engine->GradReady(id);
}

}  // namespace zero_capi
