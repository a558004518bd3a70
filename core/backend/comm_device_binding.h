// Pairs the engine's communicator with the device that holds its state
// (docs/ARCHITECTURE.md, "Layers"): the one place that decides how buffers
// and scalars cross between host and device memory for collectives.
#ifndef ZERO_CORE_BACKEND_COMM_DEVICE_BINDING_H_
#define ZERO_CORE_BACKEND_COMM_DEVICE_BINDING_H_

#include <memory>

#include "absl/status/status.h"
#include "core/comm/communicator.h"
#include "core/device/device.h"

namespace zero {

struct CommBinding {
  // Moves buffers in `device` memory (the model state's collectives).
  std::unique_ptr<Communicator> data;
  // Moves scalars in host memory (norms, agreement checks): `data` itself
  // for a host communicator, a device-staging view of it for a device one.
  std::unique_ptr<Communicator> ctrl_owned;
  Communicator* ctrl = nullptr;
};

// A host communicator over device memory stages through the host; a device
// communicator needs device memory and gets a device-staging view for the
// host-side scalars. The pair must have passed CheckCommDevicePair.
CommBinding BindCommToDevice(std::unique_ptr<Communicator> comm, Device* device);

// A device communicator with a host device is an error.
absl::Status CheckCommDevicePair(const Communicator& comm, const Device& device);

}  // namespace zero

#endif  // ZERO_CORE_BACKEND_COMM_DEVICE_BINDING_H_
