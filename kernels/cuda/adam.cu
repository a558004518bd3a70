// Fused multi-tensor Adam/AdamW: one pass reads grad (fp32/fp16/bf16), p, m,
// v and writes p, m, v and the fp16/bf16/fp32 working copy. Per element:
// math::AdamCastElement (kernels/fused_math.h).
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/multi_tensor.h"

namespace zero {
namespace cuda {
namespace {

// Many blocks per launch: at 48 tensors of 16K-element chunks a batch of
// small tensors (1000 x 67K elements) launched 240 blocks, a quarter of an
// H200's resident blocks, and ran at 0.42x a device copy; 320 tensors gave
// 1.5 waves per launch and 0.79x. 512 tensors of 4K-element chunks give 8
// to 9 waves. Kernel parameters may take 32,764 bytes since CUDA 12.1 on
// Volta and later (this build targets sm_90).
constexpr int kMaxTensors = 512;
constexpr int64_t kChunk = kThreads * 4 * 4;  // elements per block
using AdamBatch = TensorBatch<AdamTensor, kMaxTensors>;
static_assert(sizeof(AdamBatch) + sizeof(math::AdamScalars) < 32000,
              "kernel parameters must stay under 32,764 bytes");

template <class G, class W>
__device__ __forceinline__ void One(const math::AdamScalars& s,
                                    typename G::T g, float* p, float* m,
                                    float* v, typename W::T* w) {
  if (w != nullptr) {
    *w = math::AdamCastElement<G, W>(s, g, p, m, v);
  } else {
    math::AdamUpdate(s, G::Load(g), p, m, v);
  }
}

template <class G, class W>
__global__ void __launch_bounds__(kThreads)
    AdamKernel(AdamBatch batch, math::AdamScalars s) {
  typedef typename G::T GT;
  typedef typename W::T WT;
  const int t = FindTensor(batch.chunk_start, batch.count, blockIdx.x);
  const AdamTensor a = batch.tensors[t];
  const int64_t begin = (int64_t)(blockIdx.x - batch.chunk_start[t]) * kChunk;
  const int64_t end = a.n < begin + kChunk ? a.n : begin + kChunk;
  float* p = a.param;
  float* m = a.exp_avg;
  float* v = a.exp_avg_sq;
  const GT* g = static_cast<const GT*>(a.grad);
  WT* w = static_cast<WT*>(a.working);
  const bool vec = Aligned4<float>(p) && Aligned4<float>(m) &&
                   Aligned4<float>(v) && Aligned4<GT>(g) && Aligned4<WT>(w);
  const int64_t vec_end = vec ? begin + (end - begin) / 4 * 4 : begin;
  for (int64_t i = begin + 4 * threadIdx.x; i < vec_end; i += 4 * kThreads) {
    float pp[4], mm[4], vv[4];
    GT gg[4];
    WT ww[4];
    Vec4<float>::Load(p + i, pp);
    Vec4<float>::Load(m + i, mm);
    Vec4<float>::Load(v + i, vv);
    Vec4<GT>::Load(g + i, gg);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      ww[j] = math::AdamCastElement<G, W>(s, gg[j], &pp[j], &mm[j], &vv[j]);
    }
    Vec4<float>::Store(p + i, pp);
    Vec4<float>::Store(m + i, mm);
    Vec4<float>::Store(v + i, vv);
    if (w != nullptr) Vec4<WT>::Store(w + i, ww);
  }
  for (int64_t i = vec_end + threadIdx.x; i < end; i += kThreads) {
    One<G, W>(s, g[i], p + i, m + i, v + i, w == nullptr ? nullptr : w + i);
  }
}

}  // namespace

int LaunchMultiTensorAdam(const AdamTensor* tensors, int count,
                          DType grad_type, DType working_type,
                          const math::AdamScalars& s, Stream stream) {
  return DispatchType(grad_type, [&](auto g) {
    return DispatchType(working_type, [&](auto w) {
      using G = decltype(g);
      using W = decltype(w);
      return ForEachBatch<AdamTensor, kMaxTensors>(
          tensors, count, kChunk, INT32_MAX,
          [&](const AdamBatch& b, int32_t blocks) {
            AdamKernel<G, W><<<blocks, kThreads, 0, AsStream(stream)>>>(b, s);
            return LastError();
          });
    });
  });
}

}  // namespace cuda
}  // namespace zero
