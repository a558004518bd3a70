// The CPU device: aligned host memory.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/device/device.h"

namespace zero {
namespace {

constexpr size_t kAlign = 128;

class CpuDevice : public Device {
 public:
  std::string name() const override { return "cpu"; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    size_t rounded = Rounded(bytes);
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
    std::free(p);
    allocated_ -= Rounded(bytes);
  }

  void Memset0(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void Copy(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  size_t allocated_bytes() const override { return allocated_; }

 private:
  static size_t Rounded(size_t bytes) {
    size_t r = (bytes + kAlign - 1) / kAlign * kAlign;
    return r == 0 ? kAlign : r;
  }
  std::atomic<size_t> allocated_{0};
};

}  // namespace

std::unique_ptr<Device> MakeCpuDevice() { return std::make_unique<CpuDevice>(); }

}  // namespace zero
