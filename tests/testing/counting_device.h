// A CPU device that counts the memory passes made through it: elements cast
// (ToF32, FromF32), summed (Accumulate, AccumulateF32), bytes copied and
// zeroed, and the bytes all of them read and write. Tests assert how many
// passes a path makes over the gradients (issue 18, "Gradient path without
// extra copies"), not only that its result is right.
#ifndef ZERO_TESTS_TESTING_COUNTING_DEVICE_H_
#define ZERO_TESTS_TESTING_COUNTING_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/common/dtype.h"
#include "core/device/device.h"

namespace zero {
namespace testing {

struct PassCounts {
  std::atomic<int64_t> to_f32{0}, from_f32{0}, accumulate{0}, accumulate_f32{0};
  std::atomic<int64_t> copied_bytes{0}, zeroed_bytes{0};
  std::atomic<int64_t> bytes_moved{0};  // read + written by all of the above
};

class CountingDevice : public Device {
 public:
  explicit CountingDevice(PassCounts* c) : c_(c), d_(MakeCpuDevice()) {}
  std::string name() const override { return "counting-cpu"; }
  absl::StatusOr<void*> Allocate(size_t b) override { return d_->Allocate(b); }
  void Free(void* p, size_t b) override { d_->Free(p, b); }
  void Memset0(void* p, size_t b) override {
    c_->zeroed_bytes += b;
    c_->bytes_moved += b;
    d_->Memset0(p, b);
  }
  void Copy(void* dst, const void* src, size_t b) override {
    c_->copied_bytes += b;
    c_->bytes_moved += 2 * b;
    d_->Copy(dst, src, b);
  }
  size_t allocated_bytes() const override { return d_->allocated_bytes(); }
  // The update kernels are the boundary's, not the gradient path's: not
  // counted. fused_update() stays false (the default), so the boundary's
  // gradient reads show up as ToF32 here on every path alike.
  void AdamStep(const math::AdamScalars& s, const float* g, float* p, float* m, float* v,
                int64_t n, void* w, DType t) override { d_->AdamStep(s, g, p, m, v, n, w, t); }
  void SgdStep(const math::SgdScalars& s, const float* g, float* p, float* b, int64_t n,
               void* w, DType t) override { d_->SgdStep(s, g, p, b, n, w, t); }
  void ToF32(const void* s, DType t, float* d, int64_t n, float k) override {
    c_->to_f32 += n;
    c_->bytes_moved += n * static_cast<int64_t>(DTypeSize(t) + 4);
    d_->ToF32(s, t, d, n, k);
  }
  void FromF32(const float* s, void* d, DType t, int64_t n) override {
    c_->from_f32 += n;
    c_->bytes_moved += n * static_cast<int64_t>(DTypeSize(t) + 4);
    d_->FromF32(s, d, t, n);
  }
  void Accumulate(void* d, const void* s, DType t, int64_t n) override {
    c_->accumulate += n;
    c_->bytes_moved += n * static_cast<int64_t>(3 * DTypeSize(t));
    d_->Accumulate(d, s, t, n);
  }
  void AccumulateF32(void* d, const float* s, float k, DType t, int64_t n) override {
    c_->accumulate_f32 += n;
    c_->bytes_moved += n * static_cast<int64_t>(2 * DTypeSize(t) + 4);
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

 private:
  PassCounts* c_;
  std::unique_ptr<Device> d_;
};

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_COUNTING_DEVICE_H_
