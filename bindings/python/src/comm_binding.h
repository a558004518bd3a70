// _zero_c.Comm: one C communicator handle, shared with the engines that use
// it (convention 1 of zero_c_module.cc).
#ifndef ZERO_BINDINGS_PYTHON_SRC_COMM_BINDING_H_
#define ZERO_BINDINGS_PYTHON_SRC_COMM_BINDING_H_

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "call_support.h"
#include "zero_c.h"

namespace zero_py {

struct CommHandle {
  zero_comm_t* comm = nullptr;
  ~CommHandle() { zero_comm_destroy(comm); }
};

class Comm {
 public:
  explicit Comm(zero_comm_t* c) : handle_(std::make_shared<CommHandle>()) {
    handle_->comm = c;
  }

  static Comm Self() {
    zero_comm_t* c = nullptr;
    Check(zero_comm_create_self(&c));
    return Comm(c);
  }

  static Comm Mpi() {
    zero_comm_t* c = nullptr;
    CheckNoGil([&] { return zero_comm_create_mpi(nullptr, &c); });
    return Comm(c);
  }

  // MPI_COMM_WORLD's ranks over NCCL, this rank on GPU `device` (with
  // ZERO_GPU_STANDIN=1: the NCCL-shaped stand-in, core/backend/standin_select.h).
  static Comm Nccl(int32_t device) {
    zero_comm_t* c = nullptr;
    CheckNoGil([&] { return zero_comm_create_nccl(nullptr, device, &c); });
    return Comm(c);
  }

  static std::vector<Comm> Threads(int32_t world_size) {
    if (world_size < 1) {
      Raise(ZERO_INVALID_ARGUMENT, "world_size must be >= 1, got " +
                                       std::to_string(world_size));
    }
    std::vector<zero_comm_t*> raw(world_size, nullptr);
    Check(zero_comm_create_threads(world_size, raw.data()));
    std::vector<Comm> out;
    out.reserve(world_size);
    for (zero_comm_t* c : raw) out.emplace_back(c);
    return out;
  }

  zero_comm_t* get(const char* what = "Comm") const {
    if (!handle_ || !handle_->comm) Closed(what);
    return handle_->comm;
  }

  int32_t Rank() const {
    int32_t r = 0;
    Check(zero_comm_rank(get(), &r));
    return r;
  }

  int32_t Size() const {
    int32_t s = 0;
    Check(zero_comm_size(get(), &s));
    return s;
  }

  void Barrier() {
    zero_comm_t* c = get();
    CheckNoGil([&] { return zero_comm_barrier(c); });
  }

  // In-place sum over ranks of a float32 buffer (address, count).
  void AllreduceSumF32(uintptr_t address, size_t count) {
    zero_comm_t* c = get();
    CheckNoGil([&] { return zero_comm_allreduce_sum_f32(c, reinterpret_cast<float*>(address), count); });
  }

  void Broadcast(uintptr_t address, size_t bytes, int32_t root) {
    zero_comm_t* c = get();
    CheckNoGil([&] { return zero_comm_broadcast(c, reinterpret_cast<void*>(address), bytes, root); });
  }

  // Does not return for MPI/NCCL (the job is aborted).
  void Abort(const std::string& reason) {
    zero_comm_t* c = get();
    py::gil_scoped_release nogil;
    zero_comm_abort(c, reason.c_str());
  }

  void Close() {
    if (!handle_) return;
    // Engines hold a reference: the C handle must outlive them.
    if (handle_.use_count() > 1 && handle_->comm != nullptr) {
      Raise(ZERO_FAILED_PRECONDITION,
            "Comm.close(): an engine still uses this communicator; close the "
            "engine first");
    }
    handle_.reset();
  }

  bool closed() const { return !handle_ || !handle_->comm; }
  const std::shared_ptr<CommHandle>& handle() const { return handle_; }

 private:
  std::shared_ptr<CommHandle> handle_;
};

}  // namespace zero_py

#endif  // ZERO_BINDINGS_PYTHON_SRC_COMM_BINDING_H_
