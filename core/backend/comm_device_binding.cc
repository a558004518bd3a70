#include "core/backend/comm_device_binding.h"

#include "absl/strings/str_cat.h"
#include "core/backend/staging_communicator.h"

namespace zero {

absl::Status CheckCommDevicePair(const Communicator& comm, const Device& device) {
  if (comm.device_memory() && device.host_accessible()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "finalize: the ", comm.backend_name(), " communicator moves GPU "
        "memory but the engine's device is ", device.name()));
  }
  return absl::OkStatus();
}

CommBinding BindCommToDevice(std::unique_ptr<Communicator> comm, Device* device) {
  CommBinding b;
  if (comm->device_memory()) {
    // NCCL reads and writes on its own stream: order it after the device's
    // compute stream, or it reads pack buffers before the casts that fill
    // them ran (the first GPU run did).
    comm->set_wait_stream(device->stream_handle());
    b.data = std::move(comm);
    b.ctrl_owned = MakeDeviceControlCommunicator(b.data.get(), device);
    b.ctrl = b.ctrl_owned.get();
  } else if (!device->host_accessible()) {
    b.data = MakeStagingCommunicator(std::move(comm), device);
    b.ctrl = b.data.get();
  } else {
    b.data = std::move(comm);
    b.ctrl = b.data.get();
  }
  return b;
}

}  // namespace zero
