// One optimizer step of any kind (kernels/optim_math.h): Adam through the
// multi-tensor kernel (adam.cu); SGD, Lion and Adagrad through one
// elementwise kernel over math::OptimUpdate, reading the gradient in its
// stored type and writing the working copy in the same pass.
#include "kernels/cuda/device_util.cuh"
#include "kernels/optim_math.h"

namespace zero {
namespace cuda {
namespace {

constexpr int64_t kMaxBlocks = 8192;

template <class G, class W>
__global__ void __launch_bounds__(kThreads)
    OptimKernel(math::OptimScalars s, const typename G::T* g, float* p, float* s1,
                float* s2, typename W::T* work, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
    float unused1 = 0.0f, unused2 = 0.0f;
    math::OptimUpdate(s, G::Load(g[i]), p + i, s1 ? s1 + i : &unused1,
                      s2 ? s2 + i : &unused2);
    if (work != nullptr) work[i] = W::Store(p[i]);
  }
}

}  // namespace

int LaunchOptimizerStep(const math::OptimScalars& s, const void* grad, DType grad_type,
                        float* param, float* s1, float* s2, void* working,
                        DType working_type, int64_t n, Stream stream) {
  if (n <= 0) return 0;
  if (s.kind == math::kOptimAdam && s.moments_format != math::kMomentsF32) {
    return LaunchAdamPacked(s.adam, s.moments_format, grad, grad_type, param, s1, working,
                            working_type, n, stream);
  }
  if (s.kind == math::kOptimAdam) {
    AdamTensor t{param, s1, s2, grad, working, n};
    return LaunchMultiTensorAdam(&t, 1, grad_type, working_type, s.adam, stream);
  }
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return DispatchType(grad_type, [&](auto g) {
    return DispatchType(working_type, [&](auto w) {
      using G = decltype(g);
      using W = decltype(w);
      OptimKernel<G, W><<<(int)blocks, kThreads, 0, AsStream(stream)>>>(
          s, static_cast<const typename G::T*>(grad), param, s1, s2,
          static_cast<typename W::T*>(working), n);
      return LastError();
    });
  });
}

}  // namespace cuda
}  // namespace zero
