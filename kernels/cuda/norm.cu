// Squared L2 norm in double (math::SquaredTerm), deterministic: a fixed grid
// of per-block partials, then one block sums them in a fixed order.
#include "kernels/cuda/device_util.cuh"

namespace zero {
namespace cuda {
namespace {

__device__ __forceinline__ double BlockSum(double x) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = x;
  __syncthreads();
#pragma unroll
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

template <class S>
__global__ void __launch_bounds__(kThreads)
    PartialKernel(const typename S::T* x, int64_t n, double* partials) {
  typedef typename S::T T;
  double acc = 0.0;
  const bool vec = Aligned4<T>(x);
  const int64_t vec_n = vec ? n / 4 * 4 : 0;
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  const int64_t first = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  for (int64_t i = 4 * first; i < vec_n; i += 4 * stride) {
    T v[4];
    Vec4<T>::Load(x + i, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc += math::SquaredTerm(S::Load(v[j]));
  }
  for (int64_t i = vec_n + first; i < n; i += stride) {
    acc += math::SquaredTerm(S::Load(x[i]));
  }
  double total = BlockSum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads)
    FinalKernel(const double* partials, int count, double* out,
                bool accumulate) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += kThreads) acc += partials[i];
  double total = BlockSum(acc);
  if (threadIdx.x == 0) *out = accumulate ? *out + total : total;
}

}  // namespace

int LaunchSquaredNorm(const void* x, DType type, int64_t n,
                      double* workspace, double* out, bool accumulate,
                      Stream stream) {
  int64_t blocks = (n + 4 * kThreads - 1) / (4 * kThreads);
  if (blocks > kSquaredNormWorkspace) blocks = kSquaredNormWorkspace;
  if (blocks > 0) {
    int r = DispatchType(type, [&](auto s) {
      using S = decltype(s);
      PartialKernel<S><<<(int)blocks, kThreads, 0, AsStream(stream)>>>(
          static_cast<const typename S::T*>(x), n, workspace);
      return LastError();
    });
    if (r != 0) return r;
  }
  FinalKernel<<<1, kThreads, 0, AsStream(stream)>>>(workspace, (int)blocks,
                                                    out, accumulate);
  return LastError();
}

}  // namespace cuda
}  // namespace zero
