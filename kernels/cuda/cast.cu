// Elementwise passes: casts between fp32/fp16/bf16 (math::CastElement) and
// unscale + non-finite detection in one pass (math::UnscaleElement).
#include "kernels/cuda/device_util.cuh"

namespace zero {
namespace cuda {
namespace {

constexpr int64_t kMaxBlocks = 8192;  // grid-stride beyond this

template <class In, class Out>
struct CastOp {
  __device__ __forceinline__ typename Out::T operator()(typename In::T x,
                                                        int*) const {
    return math::CastElement<In, Out>(x);
  }
};

template <class In, class Out>
struct UnscaleOp {
  float factor;
  __device__ __forceinline__ typename Out::T operator()(typename In::T x,
                                                        int* found) const {
    return Out::Store(math::UnscaleElement(In::Load(x), factor, found));
  }
};

// dst[i] = op(src[i]); `flag` (may be null) is set to 1 if op reported a
// non-finite element anywhere in the block.
template <class In, class Out, class Op>
__global__ void __launch_bounds__(kThreads)
    MapKernel(const typename In::T* src, typename Out::T* dst, int64_t n,
              Op op, int* flag) {
  typedef typename In::T IT;
  typedef typename Out::T OT;
  int found = 0;
  const bool vec = Aligned4<IT>(src) && Aligned4<OT>(dst);
  const int64_t vec_n = vec ? n / 4 * 4 : 0;
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  const int64_t first = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  for (int64_t i = 4 * first; i < vec_n; i += 4 * stride) {
    IT x[4];
    OT y[4];
    Vec4<IT>::Load(src + i, x);
#pragma unroll
    for (int j = 0; j < 4; ++j) y[j] = op(x[j], &found);
    Vec4<OT>::Store(dst + i, y);
  }
  for (int64_t i = vec_n + first; i < n; i += stride) dst[i] = op(src[i], &found);
  if (flag != nullptr) {
    if (__syncthreads_or(found) && threadIdx.x == 0) *flag = 1;
  }
}

template <class In, class Out, class Op>
int LaunchMap(const void* src, void* dst, int64_t n, Op op, int* flag,
              Stream stream) {
  if (n <= 0) return 0;
  int64_t blocks = (n + 4 * kThreads - 1) / (4 * kThreads);
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  MapKernel<In, Out, Op><<<(int)blocks, kThreads, 0, AsStream(stream)>>>(
      static_cast<const typename In::T*>(src),
      static_cast<typename Out::T*>(dst), n, op, flag);
  return LastError();
}

}  // namespace

int LaunchCast(const void* src, DType src_type, void* dst,
               DType dst_type, int64_t n, Stream stream) {
  return DispatchType(src_type, [&](auto in) {
    return DispatchType(dst_type, [&](auto out) {
      using In = decltype(in);
      using Out = decltype(out);
      return LaunchMap<In, Out>(src, dst, n, CastOp<In, Out>{}, nullptr,
                                stream);
    });
  });
}

int LaunchUnscale(const void* src, DType src_type, void* dst,
                  DType dst_type, int64_t n, float factor,
                  int* nonfinite_flag, Stream stream) {
  return DispatchType(src_type, [&](auto in) {
    return DispatchType(dst_type, [&](auto out) {
      using In = decltype(in);
      using Out = decltype(out);
      return LaunchMap<In, Out>(src, dst, n, UnscaleOp<In, Out>{factor},
                                nonfinite_flag, stream);
    });
  });
}

const char* ErrorString(int err) {
  return cudaGetErrorString(static_cast<cudaError_t>(err));
}

}  // namespace cuda
}  // namespace zero
