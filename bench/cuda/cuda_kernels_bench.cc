// Effective bandwidth of each CUDA kernel against a device-to-device
// cudaMemcpy measured in the same run, as JSON lines on stdout:
//   {"kind":"copy",...} once, then {"kind":"bench","kernel":...,"ratio":...}
// where gbps = (bytes read + bytes written) / time and ratio = gbps /
// copy_gbps. Fused Adam and casts target ratio >= 0.85 ("target" field).
// A short bit-exact check against the host bodies (kernels/fused_math.h)
// comes first ({"kind":"check"}), so the binary is useful on its own when
// the GPU tests cannot be built. Exit status: 0 all checks pass, 1 a check
// failed, 2 no device (after printing {"kind":"skip"}), 3 a CUDA error.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/fused_math.h"

namespace zero {
namespace cuda {
namespace {

#define CK(x)                                                            \
  do {                                                                   \
    cudaError_t e_ = (x);                                                \
    if (e_ != cudaSuccess) {                                             \
      std::printf("{\"kind\":\"error\",\"what\":\"%s\",\"error\":\"%s\"}\n", \
                  #x, cudaGetErrorString(e_));                           \
      std::exit(3);                                                      \
    }                                                                    \
  } while (0)

#define LK(x) CK(static_cast<cudaError_t>(x))

void* DevAlloc(size_t bytes) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  CK(cudaMemset(p, 0, bytes));
  return p;
}

// Best milliseconds per call over `reps` timed batches of `iters` calls.
double TimeMs(const std::function<void()>& f, int iters, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();  // warm up
  CK(cudaDeviceSynchronize());
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a));
    for (int i = 0; i < iters; ++i) f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, (double)ms / iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

double g_copy_gbps = 0;

void Report(const char* kernel, int64_t n, double bytes, double ms,
            double target) {
  double gbps = bytes / (ms * 1e-3) / 1e9;
  double ratio = gbps / g_copy_gbps;
  std::printf(
      "{\"kind\":\"bench\",\"kernel\":\"%s\",\"n\":%lld,\"bytes\":%.0f,"
      "\"ms\":%.4f,\"gbps\":%.1f,\"copy_gbps\":%.1f,\"ratio\":%.3f,"
      "\"target\":%.2f,\"pass\":%s}\n",
      kernel, (long long)n, bytes, ms, gbps, g_copy_gbps, ratio, target,
      (target <= 0 || ratio >= target) ? "true" : "false");
  std::fflush(stdout);
}

void Check(const char* what, bool ok) {
  std::printf("{\"kind\":\"check\",\"what\":\"%s\",\"pass\":%s}\n", what,
              ok ? "true" : "false");
  std::fflush(stdout);
}

template <typename T>
std::vector<T> Down(const void* d, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

template <typename T>
void* Up(const std::vector<T>& h) {
  void* d = DevAlloc(h.size() * sizeof(T));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Bit-exact spot checks of the fused kernels against the host bodies.
bool RunChecks() {
  const size_t n = 1 << 16;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> p(n), m(n), v(n);
  std::vector<uint16_t> g(n), all(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = u(rng); m[i] = 0.1f * u(rng); v[i] = 0.01f * std::abs(u(rng));
    g[i] = math::FloatToHalf(300 * u(rng));
    all[i] = (uint16_t)i;
  }
  math::AdamScalars s =
      math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 5, 0.01f);
  AdamTensor t{(float*)Up(p), (float*)Up(m), (float*)Up(v), Up(g),
               DevAlloc(n * 2), (int64_t)n};
  LK(LaunchMultiTensorAdam(&t, 1, DType::kF16, DType::kBF16, s, nullptr));
  std::vector<uint16_t> w(n);
  for (size_t i = 0; i < n; ++i)
    w[i] = math::AdamCastElement<math::F16Storage, math::BF16Storage>(
        s, g[i], &p[i], &m[i], &v[i]);
  bool ok_adam = Down<float>(t.param, n) == p && Down<float>(t.exp_avg, n) == m &&
                 Down<float>(t.exp_avg_sq, n) == v && Down<uint16_t>(t.working, n) == w;
  // NaN != NaN would fail the float compare: p has none here (finite grads).
  Check("adam_f16_grad_bf16_working_bit_exact", ok_adam);

  void* hd = Up(all);
  void* f32 = DevAlloc(n * 4);
  void* h16 = DevAlloc(n * 2);
  LK(LaunchCast(hd, DType::kF16, f32, DType::kF32, n, nullptr));
  LK(LaunchCast(f32, DType::kF32, h16, DType::kBF16, n, nullptr));
  auto back = Down<uint16_t>(h16, n);
  bool ok_cast = true;
  for (size_t i = 0; i < n; ++i) {
    uint16_t want = math::FloatToBf16(math::HalfToFloat(all[i]));
    if (back[i] != want) ok_cast = false;
  }
  Check("cast_f16_f32_bf16_all_values_bit_exact", ok_cast);

  int* flag = (int*)DevAlloc(sizeof(int));
  LK(LaunchUnscale(hd, DType::kF16, f32, DType::kF32, n, 0.5f, flag, nullptr));
  Check("unscale_flags_inf_nan_among_all_halves",
        Down<int>(flag, 1)[0] == 1);
  for (void* x : {(void*)t.param, (void*)t.exp_avg, (void*)t.exp_avg_sq,
                  (void*)t.grad, t.working, hd, f32, h16, (void*)flag})
    cudaFree(x);
  return ok_adam && ok_cast;
}

int Main(int argc, char** argv) {
  int64_t n = 64 << 20;  // elements per buffer (256 MiB of fp32)
  int iters = 20, reps = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--n=", 4)) n = std::atoll(argv[i] + 4);
    if (!std::strncmp(argv[i], "--iters=", 8)) iters = std::atoi(argv[i] + 8);
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("{\"kind\":\"skip\",\"reason\":\"no CUDA device: %s\"}\n",
                cudaGetErrorString(e));
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"kind\":\"device\",\"name\":\"%s\",\"sm\":%d,\"cc\":\"%d.%d\","
              "\"mem_gib\":%.1f}\n",
              prop.name, prop.multiProcessorCount, prop.major, prop.minor,
              prop.totalGlobalMem / 1073741824.0);
  bool ok = RunChecks();

  // Baseline: plain device-to-device copy of a 256 MiB-class buffer.
  const size_t copy_bytes = n * 4;
  void* a = DevAlloc(copy_bytes);
  void* b = DevAlloc(copy_bytes);
  double ms = TimeMs([&] { CK(cudaMemcpyAsync(b, a, copy_bytes,
                                              cudaMemcpyDeviceToDevice)); },
                     iters, reps);
  g_copy_gbps = 2.0 * copy_bytes / (ms * 1e-3) / 1e9;
  std::printf("{\"kind\":\"copy\",\"bytes\":%zu,\"ms\":%.4f,\"gbps\":%.1f}\n",
              copy_bytes, ms, g_copy_gbps);

  // Fused Adam: read p, m, v, g; write p, m, v, working.
  float* p = (float*)DevAlloc(n * 4);
  float* m = (float*)DevAlloc(n * 4);
  float* v = (float*)DevAlloc(n * 4);
  void* g16 = DevAlloc(n * 2);
  void* w16 = DevAlloc(n * 2);
  math::AdamScalars s =
      math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1, 1.0f);
  {
    AdamTensor t{p, m, v, g16, w16, n};
    ms = TimeMs([&] { LK(LaunchMultiTensorAdam(&t, 1, DType::kF16,
                                               DType::kBF16, s, nullptr)); },
                iters, reps);
    Report("adam_f16grad_bf16work", n, n * (12.0 + 2 + 12 + 2), ms, 0.85);
    AdamTensor t32{p, m, v, a, nullptr, n};
    ms = TimeMs([&] { LK(LaunchMultiTensorAdam(&t32, 1, DType::kF32,
                                               DType::kF32, s, nullptr)); },
                iters, reps);
    Report("adam_f32grad_nowork", n, n * (12.0 + 4 + 12), ms, 0.85);
    // Many tensors (multi-tensor apply): 1000 pieces of uneven size.
    std::vector<AdamTensor> ts;
    int64_t off = 0;
    for (int i = 0; off < n; ++i) {
      // Uneven sizes, 64-element (256 B) aligned like the partition layout.
      int64_t len = std::min<int64_t>(
          n - off, ((n / 1000) + (i % 7) * 1024) / 64 * 64);
      ts.push_back({p + off, m + off, v + off,
                    (uint16_t*)g16 + off, (uint16_t*)w16 + off, len});
      off += len;
    }
    ms = TimeMs([&] { LK(LaunchMultiTensorAdam(ts.data(), (int)ts.size(),
                                               DType::kF16, DType::kF16, s,
                                               nullptr)); },
                iters, reps);
    Report("adam_multi_tensor_1000_f16", n, n * (12.0 + 2 + 12 + 2), ms, 0.85);
  }
  // Casts.
  ms = TimeMs([&] { LK(LaunchCast(p, DType::kF32, w16, DType::kF16, n, nullptr)); },
              iters, reps);
  Report("cast_f32_to_f16", n, n * 6.0, ms, 0.85);
  ms = TimeMs([&] { LK(LaunchCast(p, DType::kF32, w16, DType::kBF16, n, nullptr)); },
              iters, reps);
  Report("cast_f32_to_bf16", n, n * 6.0, ms, 0.85);
  ms = TimeMs([&] { LK(LaunchCast(g16, DType::kF16, m, DType::kF32, n, nullptr)); },
              iters, reps);
  Report("cast_f16_to_f32", n, n * 6.0, ms, 0.85);
  // Unscale + non-finite test.
  int* flag = (int*)DevAlloc(sizeof(int));
  ms = TimeMs([&] { LK(LaunchUnscale(g16, DType::kF16, m, DType::kF32, n,
                                     1.0f / 1024, flag, nullptr)); },
              iters, reps);
  Report("unscale_f16_to_f32", n, n * 6.0, ms, 0.0);
  ms = TimeMs([&] { LK(LaunchUnscale(m, DType::kF32, m, DType::kF32, n, 1.0f,
                                     flag, nullptr)); },
              iters, reps);
  Report("unscale_f32_in_place", n, n * 8.0, ms, 0.0);
  // Gradient accumulation (read dst and src, write dst).
  ms = TimeMs([&] { LK(LaunchAccumulate(w16, g16, DType::kF16, n, nullptr)); },
              iters, reps);
  Report("accumulate_f16", n, n * 6.0, ms, 0.0);
  ms = TimeMs([&] { LK(LaunchAccumulateScaled(m, DType::kF32, v, 0.5f, n,
                                              nullptr)); },
              iters, reps);
  Report("accumulate_scaled_f32", n, n * 12.0, ms, 0.0);
  // Squared norm (read only).
  double* ws = (double*)DevAlloc(kSquaredNormWorkspace * sizeof(double));
  double* out = (double*)DevAlloc(sizeof(double));
  ms = TimeMs([&] { LK(LaunchSquaredNorm(p, DType::kF32, n, ws, out, false,
                                         nullptr)); },
              iters, reps);
  Report("squared_norm_f32", n, n * 4.0, ms, 0.0);
  // Bucket flatten of 1000 uneven pieces (bytes of fp16 gradients).
  {
    std::vector<const void*> srcs;
    std::vector<int64_t> bytes;
    int64_t total = 0;
    for (int i = 0; total < n * 2; ++i) {
      int64_t len = std::min<int64_t>(n * 2 - total, (n * 2 / 1000) + (i % 5) * 2);
      srcs.push_back(static_cast<char*>(a) + total);
      bytes.push_back(len);
      total += len;
    }
    ms = TimeMs([&] { LK(LaunchFlatten(srcs.data(), bytes.data(),
                                       (int)srcs.size(), b, nullptr)); },
                iters, reps);
    Report("flatten_1000_pieces", total, 2.0 * total, ms, 0.0);
  }
  CK(cudaDeviceSynchronize());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace cuda
}  // namespace zero

int main(int argc, char** argv) { return zero::cuda::Main(argc, argv); }
