// Where model state lives. The engine allocates and copies only through this
// interface, so the core never asks which backend it runs on. The CPU device
// is the default; the CUDA device (issue: CUDA device and NCCL communicator)
// implements the same calls.
#ifndef ZERO_CORE_DEVICE_DEVICE_H_
#define ZERO_CORE_DEVICE_DEVICE_H_

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/optim_math.h"
#include "kernels/dtype.h"

namespace zero {

// What a device holds, for stats (zero_engine_device): bytes allocated now
// and their high-water mark, bytes reserved from the driver (a caching
// allocator's segments; 0 where nothing is cached) and page-locked host
// staging handed out now.
struct DeviceMemoryStats {
  int64_t bytes = 0;
  int64_t peak_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t pinned_host_bytes = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // Whether the host can read this device's memory directly (CPU: yes).
  virtual bool host_accessible() const { return true; }
  // Zero-filled, 128-byte aligned memory of `bytes` (may be 0).
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // `bytes` is what Allocate was asked for.
  virtual void Free(void* p, size_t bytes) = 0;
  virtual void Memset0(void* p, size_t bytes) = 0;
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  // A device-to-device copy queued in order with the device's other work,
  // without waiting for it: what runs after it on the device (a kernel, a
  // device communicator that waits on the stream) sees the bytes. Not for
  // host memory the caller touches next (use Copy). Default: Copy.
  virtual void CopyQueued(void* dst, const void* src, size_t bytes) { Copy(dst, src, bytes); }
  // Bytes currently allocated through this device.
  virtual size_t allocated_bytes() const = 0;
  // Default: allocated now, no high-water mark kept, nothing cached or pinned.
  virtual DeviceMemoryStats memory_stats() const {
    DeviceMemoryStats s;
    s.bytes = s.peak_bytes = static_cast<int64_t>(allocated_bytes());
    return s;
  }

  // Host memory for staging this device's transfers; page-locked when
  // `pinned` and the device has such a thing (CUDA), plain otherwise.
  virtual absl::StatusOr<void*> AllocateHost(size_t bytes, bool pinned) {
    (void)pinned;
    void* p = std::aligned_alloc(128, (bytes + 127) / 128 * 128 + 128);
    if (p == nullptr) return absl::ResourceExhaustedError("host staging allocation failed");
    return p;
  }
  virtual void FreeHost(void* p, bool pinned) {
    (void)pinned;
    std::free(p);
  }

  // Kernels over this device's memory (kernels/cpu, kernels/cuda). All
  // per-element math comes from kernels/*_math.h. Work is ordered: a later
  // call sees the effects of earlier ones; Synchronize() waits for all.
  // One optimizer step (docs/ARCHITECTURE.md, "How to add an optimizer"):
  // the update `s.kind` names (kernels/optim_math.h) over this device's fp32
  // state p, s1, s2 (the optimizer's layout; unused ones may be null),
  // reading gradients `g` as stored (dtype gt: fp32 scratch, or the raw
  // gradients) and, when `zero_grad`, zeroing them once read; the updated p
  // also goes to `work` as `work_dtype` when non-null. Every dtype and kind
  // is each device's to implement: nothing here has a default that skips it.
  virtual void OptimizerStep(const math::OptimScalars& s, void* g, DType gt, float* p,
                             float* s1, float* s2, int64_t n, void* work, DType work_dtype,
                             bool zero_grad) = 0;
  // Whether the boundary should hand OptimizerStep the raw gradients, cast
  // per tile and zeroed once read (docs/ARCHITECTURE.md, "One training
  // step"), instead of a separate cast into fp32 scratch, the update from
  // it and a zeroing pass. Both give the same bits; the CPU device fuses.
  virtual bool fused_update() const { return false; }
  // dst = float(src) * scale.
  virtual void ToF32(const void* src, DType t, float* dst, int64_t n,
                     float scale) = 0;
  // dst = cast(src).
  virtual void FromF32(const float* src, void* dst, DType t, int64_t n) = 0;
  // dst += src (both dtype t, summed in fp32).
  virtual void Accumulate(void* dst, const void* src, DType t, int64_t n) = 0;
  // dst += src * scale (dst dtype t, src fp32).
  virtual void AccumulateF32(void* dst, const float* src, float scale,
                             DType t, int64_t n) = 0;
  // Block-wise quantization (kernels/quant_math.h, bits 8 or 4): x[0, n)
  // packed into `out` (math::QuantPackedBytes bytes), and back: out = the
  // dequantized values, or out += them when `accumulate` (fp32). The CPU and
  // CUDA kernels give the same bits.
  virtual void Quantize(const float* x, int64_t n, int bits, int block, void* out) = 0;
  virtual void Dequantize(const void* in, int64_t n, int bits, int block, float* out,
                          bool accumulate) = 0;
  // Sum of squares in double; waits for the result.
  virtual double SumSquares(const void* x, DType t, int64_t n) = 0;
  // ToF32(x, kF32, x, n, scale) then SumSquares(x, kF32, n), the same bits;
  // the CPU device does both in one pass.
  virtual double ScaleSumSquares(float* x, int64_t n, float scale) {
    ToF32(x, DType::kF32, x, n, scale);
    return SumSquares(x, DType::kF32, n);
  }
  // Host fp32 <-> device values of dtype t (uploads and downloads).
  virtual void UploadF32(const float* host, void* dst, DType t, int64_t n) = 0;
  virtual void DownloadF32(const void* src, DType t, float* host,
                           int64_t n) = 0;
  virtual void Synchronize() = 0;

  // Host -> device bytes on the device's copy stream (docs/ARCHITECTURE.md,
  // "Offload": offload_param cpu uploads a slice along the prefetch trace),
  // returning an event for WaitForUpload; nothing waits for the copy until
  // then. `src` must stay unchanged and `dst` allocated until the event was
  // waited for, and every event must be waited for exactly once. Default
  // (async_uploads() false): a synchronous Copy and no event.
  virtual bool async_uploads() const { return false; }
  virtual void* UploadAsync(void* dst, const void* src, size_t bytes) {
    Copy(dst, src, bytes);
    return nullptr;
  }
  // Later work on the compute stream, and a communicator waiting on
  // stream_handle(), see the upload of `event` (null: nothing to wait for).
  virtual void WaitForUpload(void* event) { (void)event; }

  // The first error asynchronous work met (a failed kernel launch, a fault
  // on the device); OK if none. Errors are sticky: the engine turns one into
  // its own failure instead of reading garbage results.
  virtual absl::Status status() const { return absl::OkStatus(); }
  // The stream this device's work is ordered on, for a device communicator
  // to wait on before each collective (CUDA: the compute cudaStream_t; the
  // stand-in: its GuardedStream; null: work is synchronous).
  virtual void* stream_handle() const { return nullptr; }
};

std::unique_ptr<Device> MakeCpuDevice();

// A buffer owned by a Device; moves, never copies.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device* d, void* p, size_t bytes) : d_(d), p_(p), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      d_ = o.d_; p_ = o.p_; bytes_ = o.bytes_;
      o.d_ = nullptr; o.p_ = nullptr; o.bytes_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { Reset(); }
  void Reset() {
    if (d_ && p_) d_->Free(p_, bytes_);
    d_ = nullptr; p_ = nullptr; bytes_ = 0;
  }
  template <typename T = void>
  T* data() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

  static absl::StatusOr<DeviceBuffer> Make(Device* d, size_t bytes) {
    auto p = d->Allocate(bytes);
    if (!p.ok()) return p.status();
    return DeviceBuffer(d, *p, bytes);
  }

 private:
  Device* d_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace zero

#endif  // ZERO_CORE_DEVICE_DEVICE_H_
