// Block-wise int8/int4 quantization (kernels/quant_math.h): one CUDA block
// per quantization block. The block's |x| maximum is an exact max (order
// free), and every element's code and dequantized value are the ZERO_HD
// bodies of quant_math.h compiled for the device with --fmad=false, so the
// results are bitwise those of the CPU kernels (kernels/cpu/quant_simd.cc).
#include "kernels/cuda/device_util.cuh"
#include "kernels/quant_math.h"

namespace zero {
namespace cuda {
namespace {

__global__ void __launch_bounds__(kThreads)
    QuantizeKernel(const float* x, int64_t n, int bits, int block, uint8_t* out) {
  __shared__ float sh_max[kThreads];
  __shared__ int sh_bad[kThreads];
  __shared__ float sh_scale;
  const float qmax = math::QuantMax(bits);
  const int64_t nb = math::QuantBlocks(n, block);
  const int64_t b = blockIdx.x;
  const int64_t first = b * block;
  const int64_t m = n - first < block ? n - first : block;
  float amax = 0.0f;
  int bad = 0;
  for (int64_t i = threadIdx.x; i < m; i += kThreads) {
    const float v = x[first + i];
    const float a = v < 0.0f ? -v : v;
    bad |= !math::QuantFinite(a);
    amax = a > amax ? a : amax;
  }
  sh_max[threadIdx.x] = amax;
  sh_bad[threadIdx.x] = bad;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float o = sh_max[threadIdx.x + s];
      sh_max[threadIdx.x] = o > sh_max[threadIdx.x] ? o : sh_max[threadIdx.x];
      sh_bad[threadIdx.x] |= sh_bad[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sh_scale = math::QuantScale(sh_max[0], sh_bad[0] == 0, qmax);
    memcpy(out + b * 4, &sh_scale, 4);
  }
  __syncthreads();
  const float scale = sh_scale;
  uint8_t* codes = out + nb * 4;
  if (bits == 8) {
    for (int64_t i = threadIdx.x; i < m; i += kThreads) {
      codes[first + i] = static_cast<uint8_t>(
          static_cast<int8_t>(math::QuantCode(x[first + i], scale, qmax)));
    }
  } else {
    // Two codes share a byte (and an odd block shares one with the next
    // block): every nibble is OR-ed into the zeroed codes atomically, by the
    // 32-bit word that holds it (the codes start 4-aligned, padded to 4).
    for (int64_t i = threadIdx.x; i < m; i += kThreads) {
      const int64_t e = first + i;
      const uint8_t nib = math::Int4Nibble(
          static_cast<int>(math::QuantCode(x[e], scale, qmax)));
      atomicOr(reinterpret_cast<unsigned int*>(codes + (e / 2 & ~int64_t{3})),
               static_cast<unsigned int>(nib) << ((e & 1) * 4 + 8 * ((e / 2) & 3)));
    }
  }
}

template <bool kAdd>
__global__ void __launch_bounds__(kThreads)
    DequantKernel(const uint8_t* in, int64_t n, int bits, int block, float* out) {
  const int64_t nb = math::QuantBlocks(n, block);
  const uint8_t* codes = in + nb * 4;
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  for (int64_t e = (int64_t)blockIdx.x * kThreads + threadIdx.x; e < n; e += stride) {
    float scale;
    memcpy(&scale, in + (e / block) * 4, 4);
    const int q = bits == 8 ? static_cast<int>(static_cast<int8_t>(codes[e]))
                            : math::Int4FromNibble(static_cast<uint8_t>(codes[e / 2] >> ((e & 1) * 4)));
    const float v = math::Dequant(static_cast<float>(q), scale);
    out[e] = kAdd ? out[e] + v : v;
  }
}

}  // namespace

int LaunchQuantize(const float* x, int64_t n, int bits, int block, uint8_t* out,
                   Stream stream) {
  const int64_t nb = math::QuantBlocks(n, block);
  const int64_t bytes = math::QuantPackedBytes(n, bits, block);
  // Codes start zeroed: padding, and int4 nibbles are OR-ed in.
  cudaMemsetAsync(out + nb * 4, 0, bytes - nb * 4, AsStream(stream));
  if (nb == 0) return LastError();
  QuantizeKernel<<<(unsigned)nb, kThreads, 0, AsStream(stream)>>>(x, n, bits, block, out);
  return LastError();
}

int LaunchDequantize(const uint8_t* in, int64_t n, int bits, int block, float* out,
                     bool accumulate, Stream stream) {
  if (n == 0) return 0;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 65535) blocks = 65535;
  if (accumulate) {
    DequantKernel<true><<<(unsigned)blocks, kThreads, 0, AsStream(stream)>>>(in, n, bits, block, out);
  } else {
    DequantKernel<false><<<(unsigned)blocks, kThreads, 0, AsStream(stream)>>>(in, n, bits, block, out);
  }
  return LastError();
}

}  // namespace cuda
}  // namespace zero
