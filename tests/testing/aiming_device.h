// Aiming an injected IO fault (core/common/io_fault.h) at the gradient-
// accumulation read of ZeRO-Infinity's gradient files (stage 3 with
// offload_optimizer "nvme"): the write-behind's O_DIRECT edge reads hit the
// same files, so the read is found by count. A run arms an entry that never
// fires at the start of a step; the second micro-step's first AccumulateF32
// comes right after its first accumulation read, with every earlier write
// (and its edge reads) completed, so the entry's match count there is that
// read's N (io::IoFaultMatches). A second, identical run arms N.
#ifndef ZERO_TESTS_TESTING_AIMING_DEVICE_H_
#define ZERO_TESTS_TESTING_AIMING_DEVICE_H_

#include <dirent.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "core/device/device.h"
#include "tests/testing/forwarding_device.h"

namespace zero {
namespace testing {

// The CPU device, calling `on_accumulate` before each AccumulateF32.
class AimingDevice : public ForwardingDevice {
 public:
  explicit AimingDevice(std::function<void()> on_accumulate)
      : ForwardingDevice(MakeCpuDevice()), on_accumulate_(std::move(on_accumulate)) {}
  std::string name() const override { return "aiming-cpu"; }
  void AccumulateF32(void* d, const float* s, float k, DType t, int64_t n) override {
    on_accumulate_();
    inner()->AccumulateF32(d, s, k, t, n);
  }

 private:
  std::function<void()> on_accumulate_;
};

// "<dir>/<claim stem>_grad_g" of rank `rank`'s gradient files in `dir`
// (core/offload/swap_dir.h names them "zero_r<rank>_..._grad_g<group>.swp"),
// or "" when there is none: the fault's path substring.
inline std::string GradFilePrefix(const std::string& dir, int rank) {
  const std::string head = "zero_r" + std::to_string(rank) + "_";
  std::string out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string f = e->d_name;
    const size_t at = f.find("_grad_g");
    if (f.rfind(head, 0) == 0 && at != std::string::npos) out = dir + "/" + f.substr(0, at) + "_grad_g";
  }
  ::closedir(d);
  return out;
}

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_AIMING_DEVICE_H_
