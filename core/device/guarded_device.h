// The CPU stand-in for a GPU: a device whose memory the host
// cannot touch and whose work runs later, on another thread, so the CPU test
// suite sees the bugs a first GPU run would hit.
//
//  - Memory. Allocate reserves an address range mapped PROT_NONE: that is the
//    "device pointer" the engine and its callers get. The bytes live in a
//    second, private mapping (the alias) that only the device's worker and
//    the device-side agents (the NCCL-shaped communicator,
//    core/backend/standin_comm.h) reach, through Alias(). A host dereference
//    of a device pointer is SIGSEGV, as it is on a GPU.
//  - Work. Memset0, the kernels and copies are queued on one stream and run
//    by a worker thread only when something waits for them (Copy, SumSquares,
//    Upload/DownloadF32, Synchronize, or a communicator that waits on this
//    stream, see stream_handle()). Work nobody waits for runs late; that is
//    how a missing wait shows up: deterministically, not by luck of timing.
//  - Errors. A kernel given a pointer that is not this device's memory, or a
//    launch failure injected by a test, is recorded (status()); the kernel's
//    outputs are left alone and SumSquares returns NaN, like the CUDA device.
//
// Arithmetic is the CPU kernels' (kernels/cpu), so an engine on this device
// is bitwise equal to one on the CPU device when every wait is in place.
#ifndef ZERO_CORE_DEVICE_GUARDED_DEVICE_H_
#define ZERO_CORE_DEVICE_GUARDED_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/device/device.h"

namespace zero {

// The stand-in's stream, what GuardedDevice::stream_handle() points at.
class GuardedStream {
 public:
  virtual ~GuardedStream() = default;
  // Runs everything queued so far and waits for it.
  virtual void Flush() = 0;
  // The live stream `handle` names, or null (a handle of another kind).
  static GuardedStream* FromHandle(void* handle);
};

class GuardedDevice : public Device {
 public:
  // Device-side view of a device pointer: the alias of `p` (which may point
  // inside an allocation), or null when p is not stand-in device memory.
  static void* Alias(const void* p);
  static bool IsDeviceMemory(const void* p) { return Alias(p) != nullptr; }

  // A copy by the caller on its own stream (torch's, or the legacy default
  // stream, which does not wait for a non-blocking stream): NOT ordered
  // with this device's queue. Runs at once on the calling thread.
  virtual void CallerCopy(void* dst, const void* src, size_t bytes) = 0;
  // The next kernel fails like a failed CUDA launch (status() says `what`).
  virtual void FailNextKernel(const std::string& what) = 0;
  // Operations queued and not yet run.
  virtual int64_t pending() const = 0;
  // UploadAsync calls so far: each queued on the stand-in's copy stream, a
  // second queue that runs only when the compute queue reaches a
  // WaitForUpload of it (a missing wait leaves the bytes unwritten).
  virtual int64_t async_uploads_issued() const = 0;
};

std::unique_ptr<GuardedDevice> MakeGuardedDevice();

}  // namespace zero

#endif  // ZERO_CORE_DEVICE_GUARDED_DEVICE_H_
