// GPU tests of kernels/cuda against the host loop of the same per-element
// bodies (llm.c style: the CPU version is the oracle). Kernels are compiled
// with --fmad=false, so results must match bit for bit. Without a device
// every test reports SKIPPED with the reason.
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/fused_math.h"

namespace zero {
namespace cuda {
namespace {

using math::BF16Storage;
using math::F16Storage;
using math::F32Storage;

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount: "
                   << cudaGetErrorString(e) << ", count " << n << ")";
    }
  }
  void TearDown() override {
    for (void* p : allocs_) cudaFree(p);
  }
  template <typename T>
  T* Upload(const std::vector<T>& h, size_t extra_front = 0) {
    char* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, (h.size() + extra_front) * sizeof(T) + 16), 0);
    allocs_.push_back(d);
    T* p = reinterpret_cast<T*>(d) + extra_front;
    EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T),
                         cudaMemcpyHostToDevice), 0);
    return p;
  }
  template <typename T>
  std::vector<T> Download(const T* d, size_t n) {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), 0);
    return h;
  }
  std::vector<void*> allocs_;
};

std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Equal bit for bit, except that a NaN equals any NaN: which NaN bits an
// operation produces is not arithmetic (x86 gives 0xFFC00000, the GPU
// 0x7FFFFFFF), so NaN is compared by class. Half-width
// values need their format to say what a NaN is.
bool IsNan16(uint16_t x, DType t) {
  return t == DType::kF16 ? (x & 0x7C00) == 0x7C00 && (x & 0x03FF) != 0
                          : (x & 0x7F80) == 0x7F80 && (x & 0x007F) != 0;
}
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  }
  return true;
}
bool SameBits(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, DType t) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (IsNan16(a[i], t) && IsNan16(b[i], t)) continue;
    if (a[i] != b[i]) return false;
  }
  return true;
}
bool SameBits(const std::vector<int>& a, const std::vector<int>& b) { return a == b; }

TEST_F(CudaKernels, MultiTensorAdamMatchesHostBodyBitForBit) {
  // Odd sizes, one misaligned tensor (offset by one element: scalar path).
  std::vector<int64_t> sizes = {1, 3, 4097, 70000, 5, 131072};
  math::AdamScalars s = math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f,
                                              0.01f, 1, 7, 1.0f / 256);
  std::vector<AdamTensor> ts;
  struct Host {
    std::vector<float> p, m, v;
    std::vector<uint16_t> g;
  };
  std::vector<Host> hs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    size_t n = sizes[i];
    Host h;
    h.p = RandomFloats(n, 1 + i, 1.0f);
    h.m = RandomFloats(n, 100 + i, 0.1f);
    h.v = RandomFloats(n, 200 + i, 0.01f);
    for (float& x : h.v) x = std::fabs(x);
    for (float x : RandomFloats(n, 300 + i, 500.0f)) {
      h.g.push_back(math::FloatToHalf(x));
    }
    if (i == 2) h.g[17] = 0x7c00;  // inf gradient element: NaN param
    size_t off = (i == 3) ? 1 : 0;
    AdamTensor t;
    t.param = Upload(h.p, off);
    t.exp_avg = Upload(h.m, off);
    t.exp_avg_sq = Upload(h.v, off);
    t.grad = Upload(h.g, off);
    t.working = Upload(std::vector<uint16_t>(n, 0), off);
    t.n = n;
    ts.push_back(t);
    hs.push_back(std::move(h));
  }
  ASSERT_EQ(LaunchMultiTensorAdam(ts.data(), (int)ts.size(), DType::kF16,
                                  DType::kBF16, s, nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), 0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Host& h = hs[i];
    std::vector<uint16_t> w(h.p.size());
    for (size_t j = 0; j < h.p.size(); ++j) {
      w[j] = math::AdamCastElement<F16Storage, BF16Storage>(
          s, h.g[j], &h.p[j], &h.m[j], &h.v[j]);
    }
    EXPECT_TRUE(SameBits(Download(ts[i].param, sizes[i]), h.p)) << i;
    EXPECT_TRUE(SameBits(Download(ts[i].exp_avg, sizes[i]), h.m)) << i;
    EXPECT_TRUE(SameBits(Download(ts[i].exp_avg_sq, sizes[i]), h.v)) << i;
    EXPECT_TRUE(SameBits(
        Download(static_cast<uint16_t*>(ts[i].working), sizes[i]), w, DType::kBF16)) << i;
  }
}

TEST_F(CudaKernels, AdamWithoutWorkingCopyAndFp32Grads) {
  size_t n = 10001;
  auto p = RandomFloats(n, 1, 1), m = RandomFloats(n, 2, 0.1f),
       v = RandomFloats(n, 3, 0.01f), g = RandomFloats(n, 4, 1);
  for (float& x : v) x = std::fabs(x);
  math::AdamScalars s =
      math::MakeAdamScalars(1e-2f, 0.9f, 0.99f, 1e-6f, 0.1f, 0, 3, 1.0f);
  AdamTensor t{Upload(p), Upload(m), Upload(v), Upload(g), nullptr,
               (int64_t)n};
  ASSERT_EQ(LaunchMultiTensorAdam(&t, 1, DType::kF32, DType::kF16, s,
                                  nullptr), 0);
  for (size_t j = 0; j < n; ++j) math::AdamUpdate(s, g[j], &p[j], &m[j], &v[j]);
  EXPECT_TRUE(SameBits(Download(t.param, n), p));
  EXPECT_TRUE(SameBits(Download(t.exp_avg_sq, n), v));
}

TEST_F(CudaKernels, CastsOfEveryHalfAndBf16MatchHost) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = (uint16_t)i;
  const uint16_t* d = Upload(all);
  float* f32 = Upload(std::vector<float>(65536));
  uint16_t* h16 = Upload(std::vector<uint16_t>(65536));
  std::vector<float> want_f(65536);
  std::vector<uint16_t> want_h(65536);
  // fp16 -> fp32, fp16 -> bf16, bf16 -> fp32, bf16 -> fp16.
  ASSERT_EQ(LaunchCast(d, DType::kF16, f32, DType::kF32, 65536, nullptr), 0);
  for (int i = 0; i < 65536; ++i) want_f[i] = math::HalfToFloat(all[i]);
  EXPECT_TRUE(SameBits(Download(f32, 65536), want_f));
  ASSERT_EQ(LaunchCast(d, DType::kF16, h16, DType::kBF16, 65536, nullptr), 0);
  for (int i = 0; i < 65536; ++i)
    want_h[i] = math::CastElement<F16Storage, BF16Storage>(all[i]);
  EXPECT_TRUE(SameBits(Download(h16, 65536), want_h, DType::kBF16));
  ASSERT_EQ(LaunchCast(d, DType::kBF16, f32, DType::kF32, 65536, nullptr), 0);
  for (int i = 0; i < 65536; ++i) want_f[i] = math::Bf16ToFloat(all[i]);
  EXPECT_TRUE(SameBits(Download(f32, 65536), want_f));
  ASSERT_EQ(LaunchCast(d, DType::kBF16, h16, DType::kF16, 65536, nullptr), 0);
  for (int i = 0; i < 65536; ++i)
    want_h[i] = math::CastElement<BF16Storage, F16Storage>(all[i]);
  EXPECT_TRUE(SameBits(Download(h16, 65536), want_h, DType::kF16));
}

TEST_F(CudaKernels, FloatCastsRoundLikeHostOnRandomBits) {
  size_t n = 1 << 20;
  std::mt19937 rng(5);
  std::vector<float> x(n);
  for (float& f : x) {
    uint32_t u = rng();
    std::memcpy(&f, &u, 4);
  }
  x[0] = 65520.0f; x[1] = 65504.0f; x[2] = -0.0f;
  const float* d = Upload(x, 1);  // misaligned: scalar path
  uint16_t* out = Upload(std::vector<uint16_t>(n));
  for (DType t : {DType::kF16, DType::kBF16}) {
    ASSERT_EQ(LaunchCast(d, DType::kF32, out, t, n, nullptr), 0);
    std::vector<uint16_t> want(n);
    for (size_t i = 0; i < n; ++i)
      want[i] = t == DType::kF16 ? math::FloatToHalf(x[i])
                                    : math::FloatToBf16(x[i]);
    EXPECT_TRUE(SameBits(Download(out, n), want, t));
  }
}

TEST_F(CudaKernels, UnscaleFlagsOnlyNonFiniteBuffers) {
  size_t n = 100003;
  std::vector<uint16_t> g(n);
  auto r = RandomFloats(n, 9, 1000);
  for (size_t i = 0; i < n; ++i) g[i] = math::FloatToHalf(r[i]);
  uint16_t* dg = Upload(g);
  float* out = Upload(std::vector<float>(n));
  int* flag = Upload(std::vector<int>(1, 0));
  ASSERT_EQ(LaunchUnscale(dg, DType::kF16, out, DType::kF32, n,
                          1.0f / 1024, flag, nullptr), 0);
  EXPECT_EQ(Download(flag, 1)[0], 0);
  std::vector<float> want(n);
  int host_flag = 0;
  for (size_t i = 0; i < n; ++i)
    want[i] = math::UnscaleElement(math::HalfToFloat(g[i]), 1.0f / 1024,
                                   &host_flag);
  EXPECT_TRUE(SameBits(Download(out, n), want));
  g[n - 2] = 0x7e00;  // NaN near the tail
  dg = Upload(g);
  ASSERT_EQ(LaunchUnscale(dg, DType::kF16, dg, DType::kF16, n,
                          1.0f / 1024, flag, nullptr), 0);  // in place
  EXPECT_EQ(Download(flag, 1)[0], 1);
}

TEST_F(CudaKernels, SquaredNormMatchesDoubleSumAndIsDeterministic) {
  size_t n = 3000017;
  auto x = RandomFloats(n, 13, 2.0f);
  x[5] = 3e38f;  // square overflows fp32, not double
  const float* d = Upload(x);
  double* ws = Upload(std::vector<double>(kSquaredNormWorkspace));
  double* out = Upload(std::vector<double>(2));
  ASSERT_EQ(LaunchSquaredNorm(d, DType::kF32, n, ws, out, false, nullptr), 0);
  ASSERT_EQ(LaunchSquaredNorm(d, DType::kF32, n, ws, out + 1, false, nullptr), 0);
  double want = 0;
  for (float f : x) want += math::SquaredTerm(f);
  auto got = Download(out, 2);
  EXPECT_NEAR(got[0], want, 1e-12 * want);
  EXPECT_EQ(got[0], got[1]);
  ASSERT_EQ(LaunchSquaredNorm(d, DType::kF32, n, ws, out, true, nullptr), 0);
  EXPECT_EQ(Download(out, 1)[0], 2 * got[0]);
}

TEST_F(CudaKernels, FlattenUnflattenRoundTripsOddSizesAndOffsets) {
  std::vector<int64_t> bytes = {1, 0, 18, 4096, 3, 1000001, 64, 7};
  std::vector<std::vector<uint8_t>> h;
  std::vector<const void*> srcs;
  std::vector<void*> dsts;
  int64_t total = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> b(bytes[i]);
    for (int64_t j = 0; j < bytes[i]; ++j) b[j] = (uint8_t)(i * 7 + j * 13);
    srcs.push_back(Upload(b, i % 3));
    dsts.push_back(Upload(std::vector<uint8_t>(bytes[i]), (i + 1) % 5));
    h.push_back(b);
    total += bytes[i];
  }
  uint8_t* flat = Upload(std::vector<uint8_t>(total));
  ASSERT_EQ(LaunchFlatten(srcs.data(), bytes.data(), (int)bytes.size(), flat,
                          nullptr), 0);
  ASSERT_EQ(LaunchUnflatten(flat, dsts.data(), bytes.data(), (int)bytes.size(),
                            nullptr), 0);
  auto f = Download(flat, total);
  int64_t off = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(f.data() + off, h[i].data(), bytes[i])) << i;
    EXPECT_EQ(Download(static_cast<uint8_t*>(dsts[i]), bytes[i]), h[i]) << i;
    off += bytes[i];
  }
}

}  // namespace
}  // namespace cuda
}  // namespace zero
