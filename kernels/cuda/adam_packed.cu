// Adam over packed moments (kernels/moments_format_math.h): bf16 one element
// per thread, 8-bit one block of kQ8Block elements per thread (its absmax
// needs the whole block updated first). Gradients read in their stored type,
// the working copy written in the same pass.
#include "kernels/cuda/device_util.cuh"
#include "kernels/moments_format_math.h"
#include "kernels/optim_math.h"

namespace zero {
namespace cuda {
namespace {

constexpr int64_t kMaxBlocks = 8192;

template <class G, class W>
__global__ void __launch_bounds__(kThreads)
    AdamBf16Kernel(math::AdamScalars s, const typename G::T* g, float* p, uint32_t* mv,
                   typename W::T* work, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
    math::AdamUpdateBf16(s, G::Load(g[i]), p + i, mv + i);
    if (work != nullptr) work[i] = W::Store(p[i]);
  }
}

template <class G, class W>
__global__ void __launch_bounds__(kThreads)
    AdamQ8Kernel(math::AdamScalars s, const typename G::T* g, float* p, math::Q8Block* blocks,
                 typename W::T* work, int64_t n) {
  const int64_t nblocks = (n + math::kQ8Block - 1) / math::kQ8Block;
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  for (int64_t b = (int64_t)blockIdx.x * kThreads + threadIdx.x; b < nblocks; b += stride) {
    const int64_t a = b * math::kQ8Block;
    const int len = (int)(n - a < math::kQ8Block ? n - a : math::kQ8Block);
    float gf[math::kQ8Block];
    for (int i = 0; i < len; ++i) gf[i] = G::Load(g[a + i]);
    math::AdamUpdateQ8Block(s, gf, p + a, blocks + b, len);
    if (work != nullptr) {
      for (int i = 0; i < len; ++i) work[a + i] = W::Store(p[a + i]);
    }
  }
}

}  // namespace

int LaunchAdamPacked(const math::AdamScalars& s, int format, const void* grad, DType grad_type,
                     float* param, void* moments, void* working, DType working_type, int64_t n,
                     Stream stream) {
  if (n <= 0) return 0;
  const int64_t items =
      format == math::kMomentsBf16 ? n : (n + math::kQ8Block - 1) / math::kQ8Block;
  int64_t blocks = (items + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return DispatchType(grad_type, [&](auto g) {
    return DispatchType(working_type, [&](auto w) {
      using G = decltype(g);
      using W = decltype(w);
      const auto* gp = static_cast<const typename G::T*>(grad);
      auto* wp = static_cast<typename W::T*>(working);
      if (format == math::kMomentsBf16) {
        AdamBf16Kernel<G, W><<<(int)blocks, kThreads, 0, AsStream(stream)>>>(
            s, gp, param, static_cast<uint32_t*>(moments), wp, n);
      } else {
        AdamQ8Kernel<G, W><<<(int)blocks, kThreads, 0, AsStream(stream)>>>(
            s, gp, param, static_cast<math::Q8Block*>(moments), wp, n);
      }
      return LastError();
    });
  });
}

}  // namespace cuda
}  // namespace zero
