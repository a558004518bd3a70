// The CUDA device: device memory from a caching allocator over cudaMalloc,
// a compute stream, a comm stream and a copy stream joined by events, and cached pinned host
// memory for staging. Built only under --config=cuda; no CUDA types here.
//
// Ordering contract: Allocate's zero fill, Memset0, CopyAsync and the
// kernels run on the compute stream, in order; Copy waits for the compute stream, so the host
// sees the result. Free is stream-ordered: a freed block may be handed to the
// next Allocate at once, which is safe for work later enqueued on the compute
// stream. Work on the comm stream (NCCL collectives) must be joined into the
// compute stream before its buffers are freed; the NCCL communicator's calls
// are blocking, which does that.
#ifndef ZERO_CORE_DEVICE_CUDA_DEVICE_H_
#define ZERO_CORE_DEVICE_CUDA_DEVICE_H_

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/caching_allocator.h"
#include "core/device/device.h"

namespace zero {

class CudaDevice : public Device {
 public:
  // Usable CUDA devices; 0 when there is no driver or no device.
  static int DeviceCount();
  // Makes `ordinal` current on the calling thread and creates the streams.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(int ordinal);
  ~CudaDevice() override;

  std::string name() const override;
  bool host_accessible() const override { return false; }
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* p, size_t bytes) override;
  void Memset0(void* p, size_t bytes) override;
  // Any direction (unified addressing); returns when the bytes have landed.
  void Copy(void* dst, const void* src, size_t bytes) override;
  // On the compute stream, not waited for (no host round trip per piece).
  void CopyQueued(void* dst, const void* src, size_t bytes) override;
  size_t allocated_bytes() const override;

  // Kernels (kernels/cuda), enqueued on the compute stream; errors land in
  // sticky_error(). SumSquares, UploadF32 and DownloadF32 wait for their
  // result; Synchronize waits for both streams.
  void OptimizerStep(const math::OptimScalars& s, void* g, DType gt, float* p, float* s1,
                     float* s2, int64_t n, void* work, DType work_dtype,
                     bool zero_grad) override;
  void ToF32(const void* src, DType t, float* dst, int64_t n,
             float scale) override;
  void FromF32(const float* src, void* dst, DType t, int64_t n) override;
  void Accumulate(void* dst, const void* src, DType t, int64_t n) override;
  void AccumulateF32(void* dst, const float* src, float scale, DType t,
                     int64_t n) override;
  void Quantize(const float* x, int64_t n, int bits, int block, void* out) override;
  void Dequantize(const void* in, int64_t n, int bits, int block, float* out,
                  bool accumulate) override;
  double SumSquares(const void* x, DType t, int64_t n) override;
  void UploadF32(const float* host, void* dst, DType t, int64_t n) override;
  void DownloadF32(const void* src, DType t, float* host,
                   int64_t n) override;
  void Synchronize() override;

  absl::Status status() const override { return sticky_error(); }
  void* stream_handle() const override { return compute_; }

  int ordinal() const { return ordinal_; }
  // cudaStream_t of each stream.
  void* compute_stream() const { return compute_; }
  void* comm_stream() const { return comm_; }
  // Later work on one stream waits for what is enqueued now on the other.
  absl::Status ComputeWaitsForComm();
  absl::Status CommWaitsForCompute();
  absl::Status CopyAsync(void* dst, const void* src, size_t bytes);
  // On the copy stream, after the work queued so far on the compute stream
  // (dst's zero fill, an earlier user of its block); the event is recorded
  // there, and WaitForUpload makes the compute stream wait for it.
  bool async_uploads() const override { return true; }
  void* UploadAsync(void* dst, const void* src, size_t bytes) override;
  void WaitForUpload(void* event) override;

  absl::StatusOr<void*> AllocateHost(size_t bytes, bool pinned) override {
    return pinned ? AllocatePinned(bytes) : Device::AllocateHost(bytes, false);
  }
  void FreeHost(void* p, bool pinned) override {
    if (pinned) {
      FreePinned(p);
    } else {
      Device::FreeHost(p, false);
    }
  }

  // Page-locked host memory (portable), cached like device memory.
  absl::StatusOr<void*> AllocatePinned(size_t bytes);
  void FreePinned(void* p);

  DeviceMemoryStats memory_stats() const override;
  CachingAllocatorStats allocator_stats() const { return memory_->stats(); }
  CachingAllocatorStats pinned_stats() const { return pinned_->stats(); }
  // Returns wholly free cached segments (device and pinned) to CUDA.
  size_t ReleaseCache();

  // The first error a void call (Free, Memset0, Copy) met; OK if none.
  absl::Status sticky_error() const;

 private:
  explicit CudaDevice(int ordinal);
  void Note(absl::Status s);
  void NoteLaunch(int err, const char* what);
  // A temporary fp32 device buffer of n elements (not zeroed).
  absl::StatusOr<float*> Scratch(int64_t n);

  const int ordinal_;
  void* compute_ = nullptr;  // cudaStream_t
  void* comm_ = nullptr;
  void* copy_ = nullptr;  // uploads (UploadAsync)
  void* compute_done_ = nullptr;  // cudaEvent_t
  void* comm_done_ = nullptr;
  double* norm_workspace_ = nullptr;  // kSquaredNormWorkspace + 1 doubles
  std::unique_ptr<RawAllocator> device_raw_;
  std::unique_ptr<RawAllocator> pinned_raw_;
  std::unique_ptr<CachingAllocator> memory_;
  std::unique_ptr<CachingAllocator> pinned_;
  mutable std::mutex mu_;
  absl::Status sticky_;
  std::mutex norm_mu_;  // guards norm_workspace_
};

}  // namespace zero

#endif  // ZERO_CORE_DEVICE_CUDA_DEVICE_H_
