// Two-input elementwise passes: gradient accumulation (math::
// AccumulateElement, math::AccumulateScaledElement) and SGD (math::
// SgdCastElement).
#include "kernels/cuda/device_util.cuh"

namespace zero {
namespace cuda {
namespace {

constexpr int64_t kMaxBlocks = 8192;

int64_t Blocks(int64_t n) {
  int64_t b = (n + 4 * kThreads - 1) / (4 * kThreads);
  return b > kMaxBlocks ? kMaxBlocks : b;
}

template <class D>
struct AddOp {
  __device__ __forceinline__ typename D::T operator()(typename D::T d,
                                                      typename D::T s) const {
    return math::AccumulateElement<D>(d, s);
  }
};

template <class D>
struct AddScaledOp {
  float scale;
  __device__ __forceinline__ typename D::T operator()(typename D::T d,
                                                      float s) const {
    return math::AccumulateScaledElement<D>(d, s, scale);
  }
};

// dst[i] = op(dst[i], src[i]).
template <class D, typename ST, class Op>
__global__ void __launch_bounds__(kThreads)
    Map2Kernel(typename D::T* dst, const ST* src, int64_t n, Op op) {
  typedef typename D::T DT;
  const bool vec = Aligned4<DT>(dst) && Aligned4<ST>(src);
  const int64_t vec_n = vec ? n / 4 * 4 : 0;
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  const int64_t first = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  for (int64_t i = 4 * first; i < vec_n; i += 4 * stride) {
    DT d[4];
    ST s[4];
    Vec4<DT>::Load(dst + i, d);
    Vec4<ST>::Load(src + i, s);
#pragma unroll
    for (int j = 0; j < 4; ++j) d[j] = op(d[j], s[j]);
    Vec4<DT>::Store(dst + i, d);
  }
  for (int64_t i = vec_n + first; i < n; i += stride) dst[i] = op(dst[i], src[i]);
}

template <class W>
__global__ void __launch_bounds__(kThreads)
    SgdKernel(math::SgdScalars s, const float* g, float* p, float* buf,
              typename W::T* work, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n;
       i += stride) {
    float unused = 0.0f;
    typename W::T w =
        math::SgdCastElement<W>(s, g[i], p + i, buf ? buf + i : &unused);
    if (work != nullptr) work[i] = w;
  }
}

}  // namespace

int LaunchAccumulate(void* dst, const void* src, DType type, int64_t n,
                     Stream stream) {
  if (n <= 0) return 0;
  return DispatchType(type, [&](auto d) {
    using D = decltype(d);
    Map2Kernel<D><<<(int)Blocks(n), kThreads, 0, AsStream(stream)>>>(
        static_cast<typename D::T*>(dst),
        static_cast<const typename D::T*>(src), n, AddOp<D>{});
    return LastError();
  });
}

int LaunchAccumulateScaled(void* dst, DType type, const float* src,
                           float scale, int64_t n, Stream stream) {
  if (n <= 0) return 0;
  return DispatchType(type, [&](auto d) {
    using D = decltype(d);
    Map2Kernel<D><<<(int)Blocks(n), kThreads, 0, AsStream(stream)>>>(
        static_cast<typename D::T*>(dst), src, n, AddScaledOp<D>{scale});
    return LastError();
  });
}

int LaunchSgd(const float* grad, float* param, float* momentum_buf,
              void* working, DType working_type, int64_t n,
              const math::SgdScalars& s, Stream stream) {
  if (n <= 0) return 0;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return DispatchType(working_type, [&](auto w) {
    using W = decltype(w);
    SgdKernel<W><<<(int)blocks, kThreads, 0, AsStream(stream)>>>(
        s, grad, param, momentum_buf, static_cast<typename W::T*>(working), n);
    return LastError();
  });
}

}  // namespace cuda
}  // namespace zero
