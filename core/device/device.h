// Where model state lives. The engine allocates and copies only through this
// interface, so the core never asks which backend it runs on. The CPU device
// is the default; the CUDA device (issue: CUDA device and NCCL communicator)
// implements the same calls.
#ifndef ZERO_CORE_DEVICE_DEVICE_H_
#define ZERO_CORE_DEVICE_DEVICE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace zero {

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // Zero-filled, 128-byte aligned memory of `bytes` (may be 0).
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // `bytes` is what Allocate was asked for.
  virtual void Free(void* p, size_t bytes) = 0;
  virtual void Memset0(void* p, size_t bytes) = 0;
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  // Bytes currently allocated through this device.
  virtual size_t allocated_bytes() const = 0;
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
