#include "core/device/cuda_device.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_kernels.h"

namespace zero {
namespace {

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  absl::StatusCode code = e == cudaErrorMemoryAllocation
                              ? absl::StatusCode::kResourceExhausted
                              : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat("cuda device: ", what, ": ",
                                         cudaGetErrorString(e)));
}

// Makes `ordinal` current for the scope (callers may be any thread, e.g.
// the comm thread), restoring the previous device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != ordinal) cudaSetDevice(ordinal);
  }
  ~DeviceGuard() {
    int now = -1;
    cudaGetDevice(&now);
    if (prev_ >= 0 && now != prev_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};

class CudaMallocRaw : public RawAllocator {
 public:
  explicit CudaMallocRaw(int ordinal) : ordinal_(ordinal) {}
  absl::StatusOr<void*> RawAllocate(size_t bytes) override {
    DeviceGuard g(ordinal_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky launch error
      return CudaStatus(e, "cudaMalloc");
    }
    return p;
  }
  void RawFree(void* p, size_t) override {
    DeviceGuard g(ordinal_);
    cudaFree(p);
  }

 private:
  int ordinal_;
};

class PinnedRaw : public RawAllocator {
 public:
  absl::StatusOr<void*> RawAllocate(size_t bytes) override {
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return CudaStatus(e, "cudaHostAlloc");
    }
    return p;
  }
  void RawFree(void* p, size_t) override { cudaFreeHost(p); }
};

cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t E(void* e) { return static_cast<cudaEvent_t>(e); }

}  // namespace

int CudaDevice::DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int ordinal) {
  int n = DeviceCount();
  if (ordinal < 0 || ordinal >= n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda device: ordinal ", ordinal, " requested, ", n,
        " CUDA device(s) visible"));
  }
  std::unique_ptr<CudaDevice> d(new CudaDevice(ordinal));
  absl::Status s = CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice");
  cudaStream_t compute = nullptr, comm = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  if (s.ok()) {
    s = CudaStatus(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking),
                   "create compute stream");
  }
  d->compute_ = compute;
  if (s.ok()) {
    s = CudaStatus(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking),
                   "create comm stream");
  }
  d->comm_ = comm;
  cudaStream_t copy = nullptr;
  if (s.ok()) {
    s = CudaStatus(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking),
                   "create copy stream");
  }
  d->copy_ = copy;
  if (s.ok()) {
    s = CudaStatus(cudaEventCreateWithFlags(&a, cudaEventDisableTiming),
                   "create event");
  }
  d->compute_done_ = a;
  if (s.ok()) {
    s = CudaStatus(cudaEventCreateWithFlags(&b, cudaEventDisableTiming),
                   "create event");
  }
  d->comm_done_ = b;
  if (!s.ok()) return s;
  d->device_raw_ = std::make_unique<CudaMallocRaw>(ordinal);
  d->pinned_raw_ = std::make_unique<PinnedRaw>();
  d->memory_ = std::make_unique<CachingAllocator>(d->device_raw_.get());
  d->pinned_ = std::make_unique<CachingAllocator>(d->pinned_raw_.get());
  void* ws = nullptr;
  s = CudaStatus(cudaMalloc(&ws, (cuda::kSquaredNormWorkspace + 1) *
                                     sizeof(double)),
                 "norm workspace");
  if (!s.ok()) return s;
  d->norm_workspace_ = static_cast<double*>(ws);
  return d;
}

CudaDevice::~CudaDevice() {
  DeviceGuard g(ordinal_);
  if (compute_) cudaStreamSynchronize(S(compute_));
  if (comm_) cudaStreamSynchronize(S(comm_));
  if (copy_) cudaStreamSynchronize(S(copy_));
  if (norm_workspace_) cudaFree(norm_workspace_);
  memory_.reset();  // returns segments through cudaFree
  pinned_.reset();
  if (compute_done_) cudaEventDestroy(E(compute_done_));
  if (comm_done_) cudaEventDestroy(E(comm_done_));
  if (compute_) cudaStreamDestroy(S(compute_));
  if (comm_) cudaStreamDestroy(S(comm_));
  if (copy_) cudaStreamDestroy(S(copy_));
}

std::string CudaDevice::name() const { return absl::StrCat("cuda:", ordinal_); }

absl::StatusOr<void*> CudaDevice::Allocate(size_t bytes) {
  absl::StatusOr<void*> p = memory_->Allocate(bytes);
  if (!p.ok()) return p.status();
  DeviceGuard g(ordinal_);
  absl::Status s = CudaStatus(
      cudaMemsetAsync(*p, 0, memory_->BlockSize(*p), S(compute_)),
      "zero fill");
  if (!s.ok()) {
    memory_->Free(*p);
    return s;
  }
  return p;
}

void CudaDevice::Free(void* p, size_t) { memory_->Free(p); }

void CudaDevice::Memset0(void* p, size_t bytes) {
  DeviceGuard g(ordinal_);
  Note(CudaStatus(cudaMemsetAsync(p, 0, bytes, S(compute_)), "Memset0"));
}

void CudaDevice::Copy(void* dst, const void* src, size_t bytes) {
  DeviceGuard g(ordinal_);
  absl::Status s = CopyAsync(dst, src, bytes);
  if (s.ok()) {
    s = CudaStatus(cudaStreamSynchronize(S(compute_)), "Copy: synchronize");
  }
  Note(s);
}

void CudaDevice::CopyQueued(void* dst, const void* src, size_t bytes) {
  Note(CopyAsync(dst, src, bytes));
}

absl::Status CudaDevice::CopyAsync(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard g(ordinal_);
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                    S(compute_)),
                    "copy");
}

DeviceMemoryStats CudaDevice::memory_stats() const {
  const CachingAllocatorStats m = memory_->stats();
  DeviceMemoryStats s;
  s.bytes = static_cast<int64_t>(m.allocated_bytes);
  s.peak_bytes = static_cast<int64_t>(m.peak_allocated_bytes);
  s.reserved_bytes = static_cast<int64_t>(m.reserved_bytes);
  s.pinned_host_bytes = static_cast<int64_t>(pinned_->stats().allocated_bytes);
  return s;
}

size_t CudaDevice::allocated_bytes() const {
  return memory_->stats().allocated_bytes;
}

absl::Status CudaDevice::ComputeWaitsForComm() {
  DeviceGuard g(ordinal_);
  absl::Status s =
      CudaStatus(cudaEventRecord(E(comm_done_), S(comm_)), "record event");
  if (!s.ok()) return s;
  return CudaStatus(cudaStreamWaitEvent(S(compute_), E(comm_done_), 0),
                    "compute waits for comm");
}

absl::Status CudaDevice::CommWaitsForCompute() {
  DeviceGuard g(ordinal_);
  absl::Status s = CudaStatus(cudaEventRecord(E(compute_done_), S(compute_)),
                              "record event");
  if (!s.ok()) return s;
  return CudaStatus(cudaStreamWaitEvent(S(comm_), E(compute_done_), 0),
                    "comm waits for compute");
}

void* CudaDevice::UploadAsync(void* dst, const void* src, size_t bytes) {
  DeviceGuard g(ordinal_);
  cudaEvent_t after = nullptr, done = nullptr;
  absl::Status s = CudaStatus(cudaEventCreateWithFlags(&after, cudaEventDisableTiming),
                              "UploadAsync: create event");
  if (s.ok()) s = CudaStatus(cudaEventRecord(after, S(compute_)), "UploadAsync: record");
  if (s.ok()) s = CudaStatus(cudaStreamWaitEvent(S(copy_), after, 0), "UploadAsync: wait");
  if (s.ok() && bytes > 0) {
    s = CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, S(copy_)),
                   "UploadAsync: copy");
  }
  if (s.ok()) {
    s = CudaStatus(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                   "UploadAsync: create event");
  }
  if (s.ok()) s = CudaStatus(cudaEventRecord(done, S(copy_)), "UploadAsync: record");
  if (after) cudaEventDestroy(after);  // released once the wait on it is done
  if (!s.ok()) {
    Note(s);  // sticky: the engine fails instead of gathering garbage
    if (done) cudaEventDestroy(done);
    return nullptr;
  }
  return done;
}

void CudaDevice::WaitForUpload(void* event) {
  if (event == nullptr) return;
  DeviceGuard g(ordinal_);
  Note(CudaStatus(cudaStreamWaitEvent(S(compute_), E(event), 0), "WaitForUpload"));
  cudaEventDestroy(E(event));
}

void CudaDevice::Synchronize() {
  DeviceGuard g(ordinal_);
  Note(CudaStatus(cudaStreamSynchronize(S(compute_)),
                  "synchronize compute stream"));
  Note(CudaStatus(cudaStreamSynchronize(S(comm_)), "synchronize comm stream"));
  Note(CudaStatus(cudaStreamSynchronize(S(copy_)), "synchronize copy stream"));
}

void CudaDevice::OptimizerStep(const math::OptimScalars& s, void* g, DType gt, float* p,
                               float* s1, float* s2, int64_t n, void* work,
                               DType work_dtype, bool zero_grad) {
  DeviceGuard guard(ordinal_);
  NoteLaunch(cuda::LaunchOptimizerStep(s, g, gt, p, s1, s2, work, work_dtype, n, compute_),
             "OptimizerStep");
  if (zero_grad && n > 0) {
    Note(CudaStatus(cudaMemsetAsync(g, 0, static_cast<size_t>(n) * DTypeSize(gt), S(compute_)),
                    "OptimizerStep: zero the gradients"));
  }
}

void CudaDevice::ToF32(const void* src, DType t, float* dst, int64_t n,
                       float scale) {
  DeviceGuard guard(ordinal_);
  NoteLaunch(cuda::LaunchUnscale(src, t, dst, DType::kF32, n, scale, nullptr,
                                 compute_),
             "ToF32");
}

void CudaDevice::FromF32(const float* src, void* dst, DType t, int64_t n) {
  DeviceGuard guard(ordinal_);
  NoteLaunch(cuda::LaunchCast(src, DType::kF32, dst, t, n, compute_),
             "FromF32");
}

void CudaDevice::Accumulate(void* dst, const void* src, DType t, int64_t n) {
  DeviceGuard guard(ordinal_);
  NoteLaunch(cuda::LaunchAccumulate(dst, src, t, n, compute_), "Accumulate");
}

void CudaDevice::AccumulateF32(void* dst, const float* src, float scale,
                               DType t, int64_t n) {
  DeviceGuard guard(ordinal_);
  NoteLaunch(cuda::LaunchAccumulateScaled(dst, t, src, scale, n, compute_),
             "AccumulateF32");
}

void CudaDevice::Quantize(const float* x, int64_t n, int bits, int block, void* out) {
  DeviceGuard guard(ordinal_);
  NoteLaunch(cuda::LaunchQuantize(x, n, bits, block, static_cast<uint8_t*>(out), compute_),
             "Quantize");
}

void CudaDevice::Dequantize(const void* in, int64_t n, int bits, int block, float* out,
                            bool accumulate) {
  DeviceGuard guard(ordinal_);
  NoteLaunch(cuda::LaunchDequantize(static_cast<const uint8_t*>(in), n, bits, block, out,
                                    accumulate, compute_),
             "Dequantize");
}

double CudaDevice::SumSquares(const void* x, DType t, int64_t n) {
  DeviceGuard guard(ordinal_);
  std::lock_guard<std::mutex> lock(norm_mu_);
  double* out = norm_workspace_ + cuda::kSquaredNormWorkspace;
  int err = cuda::LaunchSquaredNorm(x, t, n, norm_workspace_, out, false,
                                    compute_);
  NoteLaunch(err, "SumSquares");
  double host = 0.0;
  if (err == 0) {
    absl::Status s = CudaStatus(
        cudaMemcpyAsync(&host, out, sizeof(double), cudaMemcpyDeviceToHost,
                        S(compute_)),
        "SumSquares: copy");
    if (s.ok()) {
      s = CudaStatus(cudaStreamSynchronize(S(compute_)), "SumSquares: sync");
    }
    Note(s);
    if (!s.ok()) host = std::nan("");
  } else {
    host = std::nan("");  // an error must not look like a finite norm
  }
  return host;
}

absl::StatusOr<float*> CudaDevice::Scratch(int64_t n) {
  absl::StatusOr<void*> p = memory_->Allocate(n * sizeof(float));
  if (!p.ok()) return p.status();
  return static_cast<float*>(*p);
}

void CudaDevice::UploadF32(const float* host, void* dst, DType t, int64_t n) {
  if (n <= 0) return;
  DeviceGuard guard(ordinal_);
  if (t == DType::kF32) {
    Copy(dst, host, n * sizeof(float));
    return;
  }
  absl::StatusOr<float*> tmp = Scratch(n);
  if (!tmp.ok()) return Note(tmp.status());
  absl::Status s = CopyAsync(*tmp, host, n * sizeof(float));
  if (s.ok()) {
    NoteLaunch(cuda::LaunchCast(*tmp, DType::kF32, dst, t, n, compute_),
               "UploadF32: cast");
    s = CudaStatus(cudaStreamSynchronize(S(compute_)), "UploadF32: sync");
  }
  Note(s);
  memory_->Free(*tmp);
}

void CudaDevice::DownloadF32(const void* src, DType t, float* host,
                             int64_t n) {
  if (n <= 0) return;
  DeviceGuard guard(ordinal_);
  if (t == DType::kF32) {
    Copy(host, src, n * sizeof(float));
    return;
  }
  absl::StatusOr<float*> tmp = Scratch(n);
  if (!tmp.ok()) return Note(tmp.status());
  NoteLaunch(cuda::LaunchCast(src, t, *tmp, DType::kF32, n, compute_),
             "DownloadF32: cast");
  Copy(host, *tmp, n * sizeof(float));  // waits
  memory_->Free(*tmp);
}

void CudaDevice::NoteLaunch(int err, const char* what) {
  if (err == 0) return;
  Note(absl::InternalError(absl::StrCat("cuda device: ", what, ": ",
                                        cuda::ErrorString(err))));
}

absl::StatusOr<void*> CudaDevice::AllocatePinned(size_t bytes) {
  return pinned_->Allocate(bytes);
}

void CudaDevice::FreePinned(void* p) { pinned_->Free(p); }

size_t CudaDevice::ReleaseCache() {
  DeviceGuard g(ordinal_);
  cudaStreamSynchronize(S(compute_));
  cudaStreamSynchronize(S(comm_));
  return memory_->ReleaseCache() + pinned_->ReleaseCache();
}

absl::Status CudaDevice::sticky_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sticky_;
}

void CudaDevice::Note(absl::Status s) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  std::lock_guard<std::mutex> lock(mu_);
  if (sticky_.ok()) sticky_ = s;
}

}  // namespace zero
