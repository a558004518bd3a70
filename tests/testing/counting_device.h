// A CPU device that counts the memory passes made through it: elements cast
// (ToF32, FromF32), summed (Accumulate, AccumulateF32), bytes copied and
// zeroed, and the bytes all of them read and write. Tests assert how many
// passes a path makes over the gradients (docs/ARCHITECTURE.md, "Reduced as
// stored"), not only that its result is right.
#ifndef ZERO_TESTS_TESTING_COUNTING_DEVICE_H_
#define ZERO_TESTS_TESTING_COUNTING_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/common/dtype.h"
#include "core/device/device.h"
#include "tests/testing/forwarding_device.h"

namespace zero {
namespace testing {

struct PassCounts {
  std::atomic<int64_t> to_f32{0}, from_f32{0}, accumulate{0}, accumulate_f32{0};
  std::atomic<int64_t> copied_bytes{0}, zeroed_bytes{0};
  std::atomic<int64_t> bytes_moved{0};  // read + written by all of the above
};

class CountingDevice : public ForwardingDevice {
 public:
  explicit CountingDevice(PassCounts* c) : ForwardingDevice(MakeCpuDevice()), c_(c) {}
  std::string name() const override { return "counting-cpu"; }
  void Memset0(void* p, size_t b) override {
    c_->zeroed_bytes += b;
    c_->bytes_moved += b;
    inner()->Memset0(p, b);
  }
  void Copy(void* dst, const void* src, size_t b) override {
    c_->copied_bytes += b;
    c_->bytes_moved += 2 * b;
    inner()->Copy(dst, src, b);
  }
  void CopyQueued(void* dst, const void* src, size_t b) override { Copy(dst, src, b); }
  // The update kernels are the boundary's, not the gradient path's: not
  // counted (forwarded). fused_update() stays false (Device's default), so
  // the boundary's gradient reads show up as ToF32 here on every path alike.
  void ToF32(const void* s, DType t, float* d, int64_t n, float k) override {
    c_->to_f32 += n;
    c_->bytes_moved += n * static_cast<int64_t>(DTypeSize(t) + 4);
    inner()->ToF32(s, t, d, n, k);
  }
  void FromF32(const float* s, void* d, DType t, int64_t n) override {
    c_->from_f32 += n;
    c_->bytes_moved += n * static_cast<int64_t>(DTypeSize(t) + 4);
    inner()->FromF32(s, d, t, n);
  }
  void Accumulate(void* d, const void* s, DType t, int64_t n) override {
    c_->accumulate += n;
    c_->bytes_moved += n * static_cast<int64_t>(3 * DTypeSize(t));
    inner()->Accumulate(d, s, t, n);
  }
  void AccumulateF32(void* d, const float* s, float k, DType t, int64_t n) override {
    c_->accumulate_f32 += n;
    c_->bytes_moved += n * static_cast<int64_t>(2 * DTypeSize(t) + 4);
    inner()->AccumulateF32(d, s, k, t, n);
  }

 private:
  PassCounts* c_;
};

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_COUNTING_DEVICE_H_
