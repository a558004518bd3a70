// CudaDevice on a real GPU; without one every case reports SKIPPED.
#include "core/device/cuda_device.h"

#include <cuda_runtime.h>

#include <vector>

#include "gtest/gtest.h"

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
  int64_t raw = dev_->memory_stats().raw_allocations;
  auto q = dev_->Allocate(4096);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(dev_->memory_stats().raw_allocations, raw);
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
  ASSERT_TRUE(dev_->Synchronize().ok());
  dev_->Free(*a, bytes);
  dev_->Free(*b, bytes);
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

}  // namespace
}  // namespace zero
