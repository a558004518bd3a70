// A Device that hands every call to an inner device: the base of the test
// devices that count or reshape a few calls (off_host_device.h,
// counting_device.h), so each overrides only what it watches. What a
// subclass must decide itself is left at Device's defaults: host access,
// the fused update, the stream, status, memory stats and host allocation.
#ifndef ZERO_TESTS_TESTING_FORWARDING_DEVICE_H_
#define ZERO_TESTS_TESTING_FORWARDING_DEVICE_H_

#include <memory>
#include <utility>

#include "core/device/device.h"

namespace zero {
namespace testing {

class ForwardingDevice : public Device {
 public:
  explicit ForwardingDevice(std::unique_ptr<Device> inner) : d_(std::move(inner)) {}
  absl::StatusOr<void*> Allocate(size_t b) override { return d_->Allocate(b); }
  void Free(void* p, size_t b) override { d_->Free(p, b); }
  void Memset0(void* p, size_t b) override { d_->Memset0(p, b); }
  void Copy(void* dst, const void* src, size_t b) override { d_->Copy(dst, src, b); }
  void CopyQueued(void* dst, const void* src, size_t b) override { d_->CopyQueued(dst, src, b); }
  size_t allocated_bytes() const override { return d_->allocated_bytes(); }
  void OptimizerStep(const math::OptimScalars& s, void* g, DType gt, float* p, float* s1,
                     float* s2, int64_t n, void* w, DType t, bool zero_grad) override {
    d_->OptimizerStep(s, g, gt, p, s1, s2, n, w, t, zero_grad);
  }
  void ToF32(const void* s, DType t, float* d, int64_t n, float k) override { d_->ToF32(s, t, d, n, k); }
  void FromF32(const float* s, void* d, DType t, int64_t n) override { d_->FromF32(s, d, t, n); }
  void Accumulate(void* d, const void* s, DType t, int64_t n) override { d_->Accumulate(d, s, t, n); }
  void AccumulateF32(void* d, const float* s, float k, DType t, int64_t n) override {
    d_->AccumulateF32(d, s, k, t, n);
  }
  void Quantize(const float* x, int64_t n, int bits, int block, void* out) override {
    d_->Quantize(x, n, bits, block, out);
  }
  void Dequantize(const void* in, int64_t n, int bits, int block, float* out,
                  bool accumulate) override {
    d_->Dequantize(in, n, bits, block, out, accumulate);
  }
  double SumSquares(const void* x, DType t, int64_t n) override { return d_->SumSquares(x, t, n); }
  void UploadF32(const float* h, void* d, DType t, int64_t n) override { d_->UploadF32(h, d, t, n); }
  void DownloadF32(const void* s, DType t, float* h, int64_t n) override {
    d_->DownloadF32(s, t, h, n);
  }
  void Synchronize() override { d_->Synchronize(); }

 protected:
  Device* inner() const { return d_.get(); }

 private:
  std::unique_ptr<Device> d_;
};

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_FORWARDING_DEVICE_H_
