// Shared by the .cu files: raw 4-wide loads/stores and element-type dispatch.
#ifndef ZERO_KERNELS_CUDA_DEVICE_UTIL_CUH_
#define ZERO_KERNELS_CUDA_DEVICE_UTIL_CUH_

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/fused_math.h"

namespace zero {
namespace cuda {

constexpr int kThreads = 256;

// Four consecutive raw elements in one 16-byte (fp32) or 8-byte (16-bit)
// access; the pointer must be aligned to 4 * sizeof(T).
template <typename T>
struct Vec4;

template <>
struct Vec4<float> {
  static __device__ __forceinline__ void Load(const float* p, float o[4]) {
    float4 x = *reinterpret_cast<const float4*>(p);
    o[0] = x.x; o[1] = x.y; o[2] = x.z; o[3] = x.w;
  }
  static __device__ __forceinline__ void Store(float* p, const float o[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(o[0], o[1], o[2], o[3]);
  }
};

template <>
struct Vec4<uint16_t> {
  static __device__ __forceinline__ void Load(const uint16_t* p,
                                              uint16_t o[4]) {
    uint2 x = *reinterpret_cast<const uint2*>(p);
    o[0] = (uint16_t)(x.x & 0xffffu); o[1] = (uint16_t)(x.x >> 16);
    o[2] = (uint16_t)(x.y & 0xffffu); o[3] = (uint16_t)(x.y >> 16);
  }
  static __device__ __forceinline__ void Store(uint16_t* p,
                                               const uint16_t o[4]) {
    *reinterpret_cast<uint2*>(p) =
        make_uint2((uint32_t)o[0] | ((uint32_t)o[1] << 16),
                   (uint32_t)o[2] | ((uint32_t)o[3] << 16));
  }
};

template <typename T>
__device__ __forceinline__ bool Aligned4(const void* p) {
  return p == nullptr || ((uintptr_t)p % (4 * sizeof(T))) == 0;
}

// Calls f(Storage{}) with the math:: storage type of `t`.
template <typename F>
int DispatchType(DType t, F f) {
  switch (t) {
    case DType::kF32: return f(math::F32Storage{});
    case DType::kF16: return f(math::F16Storage{});
    case DType::kBF16: return f(math::BF16Storage{});
  }
  return (int)cudaErrorInvalidValue;
}

inline cudaStream_t AsStream(Stream s) { return static_cast<cudaStream_t>(s); }

inline int LastError() { return (int)cudaGetLastError(); }

}  // namespace cuda
}  // namespace zero

#endif  // ZERO_KERNELS_CUDA_DEVICE_UTIL_CUH_
