// An NCCL-shaped communicator for the stand-in device: it moves
// stand-in device memory only (device_memory() true, like NCCL), reaches the
// bytes through the device-side aliases, and runs each collective over a
// host communicator (thread or MPI) underneath. Like NCCL, a collective
// orders itself after the compute stream only when it was given that stream
// (set_wait_stream, done by BindCommToDevice); without it, it reads buffers
// whose casts are still queued, as NCCL does on a GPU.
#ifndef ZERO_CORE_BACKEND_STANDIN_COMM_H_
#define ZERO_CORE_BACKEND_STANDIN_COMM_H_

#include <memory>

#include "core/comm/communicator.h"

namespace zero {

// Owns `inner`, a host communicator.
std::unique_ptr<Communicator> MakeStandinDeviceComm(std::unique_ptr<Communicator> inner);

}  // namespace zero

#endif  // ZERO_CORE_BACKEND_STANDIN_COMM_H_
