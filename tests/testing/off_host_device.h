// A stand-in for a GPU on the CPU that counts the bytes copied through it,
// so the engine takes its device paths (staged collectives, ZeRO-Offload).
// Its memory is the guarded stand-in's (core/device/guarded_device.h, issue
// 15): mapped PROT_NONE, work run by a worker when waited for, so a host
// dereference of its "device" memory crashes here as on a GPU (it was
// ordinary host memory, which let such a dereference pass).
#ifndef ZERO_TESTS_TESTING_OFF_HOST_DEVICE_H_
#define ZERO_TESTS_TESTING_OFF_HOST_DEVICE_H_

#include <atomic>
#include <memory>
#include <string>

#include "core/device/device.h"
#include "core/device/guarded_device.h"

namespace zero {
namespace testing {

// The guarded stand-in, counting the bytes copied through it.
class OffHostDevice : public Device {
 public:
  OffHostDevice() : d_(MakeGuardedDevice()) {}
  std::string name() const override { return "offhost"; }
  bool host_accessible() const override { return false; }
  absl::StatusOr<void*> Allocate(size_t b) override { return d_->Allocate(b); }
  void Free(void* p, size_t b) override { d_->Free(p, b); }
  void Memset0(void* p, size_t b) override { d_->Memset0(p, b); }
  void Copy(void* dst, const void* src, size_t b) override {
    copied += b;
    d_->Copy(dst, src, b);
  }
  void CopyQueued(void* dst, const void* src, size_t b) override {
    copied += b;
    d_->CopyQueued(dst, src, b);
  }
  size_t allocated_bytes() const override { return d_->allocated_bytes(); }
  void AdamStep(const math::AdamScalars& s, const float* g, float* p, float* m, float* v,
                int64_t n, void* w, DType t) override { d_->AdamStep(s, g, p, m, v, n, w, t); }
  void SgdStep(const math::SgdScalars& s, const float* g, float* p, float* b, int64_t n,
               void* w, DType t) override { d_->SgdStep(s, g, p, b, n, w, t); }
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
  void DownloadF32(const void* s, DType t, float* h, int64_t n) override { d_->DownloadF32(s, t, h, n); }
  void Synchronize() override { d_->Synchronize(); }
  absl::Status status() const override { return d_->status(); }
  void* stream_handle() const override { return d_->stream_handle(); }
  DeviceMemoryStats memory_stats() const override { return d_->memory_stats(); }
  absl::StatusOr<void*> AllocateHost(size_t bytes, bool pinned) override {
    return d_->AllocateHost(bytes, pinned);
  }
  void FreeHost(void* p, bool pinned) override { d_->FreeHost(p, pinned); }
  static inline std::atomic<int64_t> copied{0};

 private:
  std::unique_ptr<Device> d_;
};

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_OFF_HOST_DEVICE_H_
