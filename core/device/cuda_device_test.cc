// CudaDevice on a real GPU; without one every case reports SKIPPED.
#include "core/device/cuda_device.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/moments_format_step.h"
#include "kernels/moments_format_math.h"

namespace zero {
namespace {

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDevice::DeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device visible (driver missing or no GPU)";
    }
    auto d = CudaDevice::Create(0);
    ASSERT_TRUE(d.ok()) << d.status();
    dev_ = std::move(*d);
  }
  std::unique_ptr<CudaDevice> dev_;
};

TEST(CudaDeviceNoGpu, CreateFailsCleanlyWhenNoDeviceIsVisible) {
  if (CudaDevice::DeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  auto d = CudaDevice::Create(0);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CudaDeviceTest, AllocationsAreZeroFilledAndRoundTripThroughHost) {
  const size_t n = 1000003;
  auto p = dev_->Allocate(n * sizeof(float));
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<float> h(n, 1.0f);
  dev_->Copy(h.data(), *p, n * sizeof(float));
  for (float x : h) ASSERT_EQ(x, 0.0f);
  for (size_t i = 0; i < n; ++i) h[i] = (float)i;
  dev_->Copy(*p, h.data(), n * sizeof(float));
  std::vector<float> back(n);
  dev_->Copy(back.data(), *p, n * sizeof(float));
  EXPECT_EQ(back, h);
  EXPECT_GE(dev_->allocated_bytes(), n * sizeof(float));
  dev_->Free(*p, n * sizeof(float));
  EXPECT_EQ(dev_->allocated_bytes(), 0u);
  EXPECT_TRUE(dev_->sticky_error().ok()) << dev_->sticky_error();
}

TEST_F(CudaDeviceTest, ReusedBlockIsZeroedAgainWithoutRawAllocation) {
  auto p = dev_->Allocate(4096);
  ASSERT_TRUE(p.ok());
  std::vector<char> ones(4096, 1);
  dev_->Copy(*p, ones.data(), 4096);
  dev_->Free(*p, 4096);
  int64_t raw = dev_->allocator_stats().raw_allocations;
  auto q = dev_->Allocate(4096);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(dev_->allocator_stats().raw_allocations, raw);
  std::vector<char> h(4096, 7);
  dev_->Copy(h.data(), *q, 4096);
  EXPECT_EQ(h, std::vector<char>(4096, 0));
  dev_->Free(*q, 4096);
}

TEST_F(CudaDeviceTest, StreamsJoinThroughEvents) {
  const size_t bytes = 64 << 20;
  auto a = dev_->Allocate(bytes);
  auto b = dev_->Allocate(bytes);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<char> h(bytes, 3);
  ASSERT_TRUE(dev_->CopyAsync(*a, h.data(), bytes).ok());
  ASSERT_TRUE(dev_->CommWaitsForCompute().ok());
  // On the comm stream: b <- a, then compute waits and copies b to host.
  ASSERT_EQ(cudaMemcpyAsync(*b, *a, bytes, cudaMemcpyDeviceToDevice,
                            static_cast<cudaStream_t>(dev_->comm_stream())),
            cudaSuccess);
  ASSERT_TRUE(dev_->ComputeWaitsForComm().ok());
  std::vector<char> back(bytes, 0);
  dev_->Copy(back.data(), *b, bytes);
  EXPECT_EQ(back, h);
  dev_->Synchronize();
  EXPECT_TRUE(dev_->sticky_error().ok()) << dev_->sticky_error();
  dev_->Free(*a, bytes);
  dev_->Free(*b, bytes);
}

// UploadAsync on the copy stream (offload_param cpu's prefetch, the NVMe
// store's next piece): ordered after the compute stream's work so far (a
// fresh block's zero fill must not land over it), and seen by compute work
// after WaitForUpload; from pinned memory, so the copy is truly async.
TEST_F(CudaDeviceTest, UploadsOnTheCopyStreamOrderWithComputeThroughEvents) {
  ASSERT_TRUE(dev_->async_uploads());
  const size_t bytes = 32 << 20;
  auto h = dev_->AllocateHost(bytes, /*pinned=*/true);
  ASSERT_TRUE(h.ok()) << h.status();
  std::memset(*h, 7, bytes);
  for (int round = 0; round < 3; ++round) {
    auto a = dev_->Allocate(bytes);  // zero fill queued on the compute stream
    ASSERT_TRUE(a.ok());
    void* ev = dev_->UploadAsync(*a, *h, bytes);
    ASSERT_NE(ev, nullptr);
    dev_->WaitForUpload(ev);
    std::vector<char> back(bytes, 0);
    dev_->Copy(back.data(), *a, bytes);  // compute stream, after the wait
    EXPECT_EQ(back, std::vector<char>(bytes, 7)) << "round " << round;
    dev_->Free(*a, bytes);
  }
  dev_->Synchronize();
  EXPECT_TRUE(dev_->sticky_error().ok()) << dev_->sticky_error();
  dev_->FreeHost(*h, true);
}

TEST_F(CudaDeviceTest, PinnedStagingIsCachedAndPageLocked) {
  auto p = dev_->AllocatePinned(1 << 20);
  ASSERT_TRUE(p.ok()) << p.status();
  cudaPointerAttributes attr;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, *p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  dev_->FreePinned(*p);
  auto q = dev_->AllocatePinned(1 << 20);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  EXPECT_EQ(dev_->pinned_stats().raw_allocations, 1);
  dev_->FreePinned(*q);
  EXPECT_GT(dev_->ReleaseCache(), 0u);
}

// The CPU device is the oracle: every Device kernel must give the same bits
// on the GPU (both sides compute kernels/*_math.h without FMA contraction).
class KernelsVsCpu : public CudaDeviceTest {
 protected:
  static constexpr int64_t kN = 100003;  // odd: vector body plus a tail
  void SetUp() override {
    CudaDeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    cpu_ = MakeCpuDevice();
    std::mt19937 rng(23);
    std::uniform_real_distribution<float> u(-2, 2);
    for (auto* v : {&a_, &b_, &c_, &d_}) {
      v->resize(kN);
      for (float& x : *v) x = u(rng);
    }
    for (float& x : c_) x = std::fabs(x) * 0.01f;  // a second moment
  }
  // A device buffer holding `h` as dtype t (through UploadF32).
  void* Up(const std::vector<float>& h, DType t) {
    auto p = dev_->Allocate(kN * 4);
    EXPECT_TRUE(p.ok());
    dev_->UploadF32(h.data(), *p, t, kN);
    bufs_.push_back(*p);
    return *p;
  }
  // Raw bytes of a device buffer.
  std::vector<char> Bytes(const void* d, size_t bytes) {
    std::vector<char> h(bytes);
    dev_->Copy(h.data(), d, bytes);
    return h;
  }
  void TearDown() override {
    if (dev_) {
      for (void* p : bufs_) dev_->Free(p, kN * 4);
      EXPECT_TRUE(dev_->sticky_error().ok()) << dev_->sticky_error();
    }
  }
  std::unique_ptr<Device> cpu_;
  std::vector<float> a_, b_, c_, d_;
  std::vector<void*> bufs_;
};

// Every optimizer kind (kernels/optim_math.h), fp32 and raw bf16 gradients
// (zeroed once read), every working dtype: the CUDA kernels give the CPU
// device's bits.
TEST_F(KernelsVsCpu, EveryOptimizerMatchesCpuDeviceBitForBit) {
  std::vector<math::OptimScalars> kinds(4);
  kinds[0].kind = math::kOptimAdam;
  kinds[0].adam = math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 3, 0.5f);
  kinds[1].kind = math::kOptimSgd;
  kinds[1].sgd = math::SgdScalars{0.1f, 0.9f, 0.0f, 0.01f, 1.0f, 1, 0};
  kinds[2].kind = math::kOptimLion;
  kinds[2].lion = math::MakeLionScalars(1e-3f, 0.9f, 0.99f, 0.1f, 0.5f);
  kinds[3].kind = math::kOptimAdagrad;
  kinds[3].adagrad = math::MakeAdagradScalars(1e-2f, 1e-10f, 0.01f, 0.5f);
  auto bytes_of = [](const void* p, size_t n) {
    return std::vector<char>((const char*)p, (const char*)p + n);
  };
  for (const math::OptimScalars& s : kinds) {
    for (DType gt : {DType::kF32, DType::kBF16}) {
      for (DType w : {DType::kF16, DType::kBF16, DType::kF32}) {
        SCOPED_TRACE(::testing::Message() << "kind " << s.kind << " grads " << DTypeName(gt)
                                        << " working " << DTypeName(w));
        std::vector<float> p = a_, s1 = b_, s2 = c_;
        std::vector<char> hg(kN * DTypeSize(gt));
        cpu_->FromF32(d_.data(), hg.data(), gt, kN);
        std::vector<uint16_t> hw(2 * kN);
        cpu_->OptimizerStep(s, hg.data(), gt, p.data(), s1.data(), s2.data(), kN, hw.data(), w,
                            true);
        void* dg = Up(d_, gt);
        float* dp = (float*)Up(a_, DType::kF32);
        float* d1 = (float*)Up(b_, DType::kF32);
        float* d2 = (float*)Up(c_, DType::kF32);
        void* dw = Up(a_, DType::kF32);
        dev_->OptimizerStep(s, dg, gt, dp, d1, d2, kN, dw, w, true);
        EXPECT_EQ(Bytes(dp, kN * 4), bytes_of(p.data(), kN * 4));
        EXPECT_EQ(Bytes(d1, kN * 4), bytes_of(s1.data(), kN * 4));
        EXPECT_EQ(Bytes(d2, kN * 4), bytes_of(s2.data(), kN * 4));
        EXPECT_EQ(Bytes(dw, kN * DTypeSize(w)), bytes_of(hw.data(), kN * DTypeSize(w)));
        EXPECT_EQ(Bytes(dg, kN * DTypeSize(gt)), std::vector<char>(kN * DTypeSize(gt), 0));
      }
    }
  }
}

// Adam over packed moments (kernels/moments_format_math.h, bf16 and 8-bit
// blocks, a partial last block when kN is not a multiple of 64): the CUDA
// kernel gives the CPU device's bits, moments included.
TEST_F(KernelsVsCpu, PackedMomentsAdamMatchesCpuDeviceBitForBit) {
  for (int format : {math::kMomentsBf16, math::kMomentsQ8}) {
    math::OptimScalars s{};
    s.kind = math::kOptimAdam;
    s.moments_format = format;
    s.adam = math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 3, 0.5f);
    std::vector<float> v(kN);
    for (size_t i = 0; i < kN; ++i) v[i] = std::fabs(c_[i]);
    const size_t bytes = static_cast<size_t>(math::PackedMomentsBytes(format, kN));
    ASSERT_LE(bytes, kN * 4);
    std::vector<char> packed(kN * 4);
    cpu::PackMoments(format, b_.data(), v.data(), packed.data(), kN);
    for (DType gt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << "format " << format << " grads " << DTypeName(gt));
      std::vector<float> p = a_;
      std::vector<char> mv = packed;
      std::vector<char> hg(kN * DTypeSize(gt));
      cpu_->FromF32(d_.data(), hg.data(), gt, kN);
      std::vector<uint16_t> hw(kN);
      cpu_->OptimizerStep(s, hg.data(), gt, p.data(), reinterpret_cast<float*>(mv.data()),
                          nullptr, kN, hw.data(), DType::kBF16, true);
      void* dg = Up(d_, gt);
      float* dp = (float*)Up(a_, DType::kF32);
      float* dmv = (float*)Up(b_, DType::kF32);
      dev_->Copy(dmv, packed.data(), kN * 4);
      void* dw = Up(a_, DType::kF32);
      dev_->OptimizerStep(s, dg, gt, dp, dmv, nullptr, kN, dw, DType::kBF16, true);
      EXPECT_EQ(Bytes(dp, kN * 4), std::vector<char>((char*)p.data(), (char*)p.data() + kN * 4));
      EXPECT_EQ(Bytes(dmv, bytes), std::vector<char>(mv.data(), mv.data() + bytes));
      EXPECT_EQ(Bytes(dw, kN * 2), std::vector<char>((char*)hw.data(), (char*)hw.data() + kN * 2));
    }
  }
}

TEST_F(KernelsVsCpu, CastsAccumulationAndNormMatchCpuDevice) {
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32}) {
    const size_t esz = DTypeSize(t);
    // Upload/Download and FromF32/ToF32.
    std::vector<char> ha(kN * esz), hb(kN * esz);
    cpu_->FromF32(a_.data(), ha.data(), t, kN);
    cpu_->FromF32(b_.data(), hb.data(), t, kN);
    void* da = Up(a_, t);
    void* db = Up(b_, t);
    EXPECT_EQ(Bytes(da, kN * esz), ha);
    std::vector<float> back(kN), want(kN);
    cpu_->ToF32(ha.data(), t, want.data(), kN, 0.25f);
    float* tmp = (float*)Up(a_, DType::kF32);
    dev_->ToF32(da, t, tmp, kN, 0.25f);
    dev_->DownloadF32(tmp, DType::kF32, back.data(), kN);
    EXPECT_EQ(0, std::memcmp(back.data(), want.data(), kN * 4));
    // Accumulate and AccumulateF32.
    cpu_->Accumulate(ha.data(), hb.data(), t, kN);
    dev_->Accumulate(da, db, t, kN);
    EXPECT_EQ(Bytes(da, kN * esz), ha);
    float* dc = (float*)Up(c_, DType::kF32);
    cpu_->AccumulateF32(ha.data(), c_.data(), 3.0f, t, kN);
    dev_->AccumulateF32(da, dc, 3.0f, t, kN);
    EXPECT_EQ(Bytes(da, kN * esz), ha);
    // Squared norm: same terms, different summation order.
    double want_norm = cpu_->SumSquares(ha.data(), t, kN);
    double got_norm = dev_->SumSquares(da, t, kN);
    EXPECT_NEAR(got_norm, want_norm, 1e-12 * want_norm);
  }
}

}  // namespace
}  // namespace zero
