// Element types of working params and gradients (shared by kernels and core).
#ifndef ZERO_KERNELS_DTYPE_H_
#define ZERO_KERNELS_DTYPE_H_

#include <cstddef>
#include <cstdint>

namespace zero {

enum class DType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }

inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
  }
  return "?";
}

}  // namespace zero

#endif  // ZERO_KERNELS_DTYPE_H_
