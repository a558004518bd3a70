// The CPU device: aligned host memory.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant_simd.h"

namespace zero {
namespace {

constexpr size_t kAlign = 128;
// Buffers this large are mapped and unmapped directly: freed memory goes
// back to the OS at once. Through malloc, glibc's dynamic mmap threshold
// rises past the first freed buffer of a size, and later gather buffers
// come from heaps it keeps, so the resident set would depend on allocation
// order rather than on what is live (ZeRO-Infinity's bound on host memory,
// tests/infinity_rss_test.py). Mapped pages are zero already.
constexpr size_t kMapBytes = size_t{1} << 20;

class CpuDevice : public Device {
 public:
  std::string name() const override { return "cpu"; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    size_t rounded = Rounded(bytes);
    if (rounded >= kMapBytes) {
      void* m = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) {
        return absl::ResourceExhaustedError(
            absl::StrCat("cpu device: cannot allocate ", bytes, " bytes"));
      }
      allocated_ += rounded;
      return m;
    }
    void* p = std::aligned_alloc(kAlign, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cpu device: cannot allocate ", bytes, " bytes"));
    }
    std::memset(p, 0, rounded);
    allocated_ += rounded;
    return p;
  }

  void Free(void* p, size_t bytes) override {
    const size_t rounded = Rounded(bytes);
    if (rounded >= kMapBytes) {
      munmap(p, rounded);
    } else {
      std::free(p);
    }
    allocated_ -= rounded;
  }

  void Memset0(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void Copy(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  size_t allocated_bytes() const override { return allocated_; }

  void OptimizerStep(const math::OptimScalars& s, void* g, DType gt, float* p, float* s1,
                     float* s2, int64_t n, void* work, DType t, bool zero_grad) override {
    cpu::OptimizerStep(s, g, gt, p, s1, s2, n, work, t, zero_grad);
  }
  bool fused_update() const override { return true; }
  void ToF32(const void* src, DType t, float* dst, int64_t n, float scale) override {
    cpu::ToF32(src, t, dst, n, scale);
  }
  void FromF32(const float* src, void* dst, DType t, int64_t n) override {
    cpu::FromF32(src, dst, t, n);
  }
  void Accumulate(void* dst, const void* src, DType t, int64_t n) override {
    cpu::Accumulate(dst, src, t, n);
  }
  void Quantize(const float* x, int64_t n, int bits, int block, void* out) override {
    cpu::QuantizePiece(x, n, bits, block, static_cast<uint8_t*>(out));
  }
  void Dequantize(const void* in, int64_t n, int bits, int block, float* out,
                  bool accumulate) override {
    if (accumulate) {
      cpu::DequantizeAdd(static_cast<const uint8_t*>(in), n, bits, block, out);
    } else {
      cpu::DequantizePiece(static_cast<const uint8_t*>(in), n, bits, block, out);
    }
  }
  void AccumulateF32(void* dst, const float* src, float scale, DType t, int64_t n) override {
    cpu::AccumulateF32(dst, src, scale, t, n);
  }
  double ScaleSumSquares(float* x, int64_t n, float scale) override {
    return cpu::ScaleSumSquares(x, n, scale);
  }
  double SumSquares(const void* x, DType t, int64_t n) override {
    return cpu::SumSquares(x, t, n);
  }
  // Host memory is device memory here.
  void UploadF32(const float* host, void* dst, DType t, int64_t n) override {
    cpu::FromF32(host, dst, t, n);
  }
  void DownloadF32(const void* src, DType t, float* host, int64_t n) override {
    cpu::ToF32(src, t, host, n, 1.0f);
  }
  void Synchronize() override {}

 private:
  static size_t Rounded(size_t bytes) {
    size_t r = (bytes + kAlign - 1) / kAlign * kAlign;
    return r == 0 ? kAlign : r;
  }
  std::atomic<size_t> allocated_{0};
};

}  // namespace

// Ranks sharing a node share its cores: unless the user chose
// OMP_NUM_THREADS, give each rank its share (as DeepSpeed's launcher does),
// so idle OpenMP workers of one rank do not spin on cores another needs.
void ShareCoresWithLocalRanks() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local == nullptr) local = std::getenv("SLURM_NTASKS_PER_NODE");
    const int ranks = local ? std::max(1, std::atoi(local)) : 1;
    if (ranks <= 1) return;
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    cpu::SetThreads(std::max(1, cores / ranks));
  });
}

std::unique_ptr<Device> MakeCpuDevice() {
  ShareCoresWithLocalRanks();
  return std::make_unique<CpuDevice>();
}

}  // namespace zero
