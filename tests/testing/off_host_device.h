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
#include "tests/testing/forwarding_device.h"

namespace zero {
namespace testing {

// The guarded stand-in, counting the bytes copied through it.
class OffHostDevice : public ForwardingDevice {
 public:
  OffHostDevice() : ForwardingDevice(MakeGuardedDevice()) {}
  std::string name() const override { return "offhost"; }
  bool host_accessible() const override { return false; }
  void Copy(void* dst, const void* src, size_t b) override {
    copied += b;
    inner()->Copy(dst, src, b);
  }
  void CopyQueued(void* dst, const void* src, size_t b) override {
    copied += b;
    inner()->CopyQueued(dst, src, b);
  }
  absl::Status status() const override { return inner()->status(); }
  void* stream_handle() const override { return inner()->stream_handle(); }
  DeviceMemoryStats memory_stats() const override { return inner()->memory_stats(); }
  absl::StatusOr<void*> AllocateHost(size_t bytes, bool pinned) override {
    return inner()->AllocateHost(bytes, pinned);
  }
  void FreeHost(void* p, bool pinned) override { inner()->FreeHost(p, pinned); }
  static inline std::atomic<int64_t> copied{0};
};

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_OFF_HOST_DEVICE_H_
