// The C ABI's communicator calls: creating one (self, threads, MPI, NCCL),
// its rank and size, and the collectives a caller may run on it.
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/call_support.h"
#include "core/backend/device_factory.h"
#include "core/comm/mpi_communicator.h"
#include "core/comm/thread_communicator.h"
#include "zero_c.h"

namespace {

using zero_capi::Guard;
using zero_capi::LastError;
using zero_capi::Report;

}  // namespace

extern "C" {

zero_status zero_comm_create_self(zero_comm_t** out) {
  ZERO_CHECK_ARG("zero_comm_create_self", out);
  return Guard([&] {
    *out = new zero_comm_t{std::move(zero::MakeThreadCommunicators(1)[0])};
    return Report(absl::OkStatus());
  });
}

zero_status zero_comm_create_mpi(const void* mpi_comm, zero_comm_t** out) {
  ZERO_CHECK_ARG("zero_comm_create_mpi", out);
  return Guard([&] {
    auto c = zero::MakeMpiCommunicator(mpi_comm);
    if (!c.ok()) return Report(c.status());
    *out = new zero_comm_t{std::move(*c)};
    return Report(absl::OkStatus());
  });
}

zero_status zero_comm_create_nccl(const void* mpi_comm, int32_t cuda_device,
                                  zero_comm_t** out) {
  ZERO_CHECK_ARG("zero_comm_create_nccl", out);
  return Guard([&] {
    auto c = zero::MakeNcclComm(mpi_comm, cuda_device, 300.0);
    if (!c.ok()) return Report(c.status());
    *out = new zero_comm_t{std::move(*c)};
    return Report(absl::OkStatus());
  });
}

zero_status zero_comm_create_threads(int32_t world_size, zero_comm_t** out) {
  ZERO_CHECK_ARG("zero_comm_create_threads", out);
  if (world_size < 1 || world_size > 4096) {
    LastError() = absl::StrCat("zero_comm_create_threads: world_size ", world_size, " not in 1..4096");
    return ZERO_INVALID_ARGUMENT;
  }
  return Guard([&] {
    auto comms = zero::MakeThreadCommunicators(world_size);
    for (int r = 0; r < world_size; ++r) out[r] = new zero_comm_t{std::move(comms[r])};
    return Report(absl::OkStatus());
  });
}

zero_status zero_comm_rank(const zero_comm_t* comm, int32_t* rank) {
  ZERO_CHECK_ARG("zero_comm_rank", comm);
  ZERO_CHECK_ARG("zero_comm_rank", rank);
  *rank = comm->comm->rank();
  return ZERO_OK;
}

zero_status zero_comm_size(const zero_comm_t* comm, int32_t* size) {
  ZERO_CHECK_ARG("zero_comm_size", comm);
  ZERO_CHECK_ARG("zero_comm_size", size);
  *size = comm->comm->world_size();
  return ZERO_OK;
}

zero_status zero_comm_barrier(zero_comm_t* comm) {
  ZERO_CHECK_ARG("zero_comm_barrier", comm);
  return Guard([&] { return Report(comm->comm->Barrier()); });
}

zero_status zero_comm_allreduce_sum_f32(zero_comm_t* comm, float* data,
                                        size_t count) {
  ZERO_CHECK_ARG("zero_comm_allreduce_sum_f32", comm);
  if (count > 0) ZERO_CHECK_ARG("zero_comm_allreduce_sum_f32", data);
  return Guard([&] {
    return Report(comm->comm->AllReduce(data, static_cast<int64_t>(count), zero::ReduceOp::kSum));
  });
}

zero_status zero_comm_broadcast(zero_comm_t* comm, void* data, size_t bytes, int32_t root) {
  ZERO_CHECK_ARG("zero_comm_broadcast", comm);
  if (bytes > 0) ZERO_CHECK_ARG("zero_comm_broadcast", data);
  return Guard([&] {
    if (root < 0 || root >= comm->comm->world_size()) {
      return Report(absl::InvalidArgumentError(absl::StrCat(
          "zero_comm_broadcast: root ", root, " is not a rank of a world of ",
          comm->comm->world_size())));
    }
    return Report(comm->comm->Broadcast(data, static_cast<int64_t>(bytes), root));
  });
}

void zero_comm_abort(zero_comm_t* comm, const char* reason) {
  if (comm == nullptr) return;
  comm->comm->Abort(reason != nullptr ? reason : "aborted");
}

void zero_comm_destroy(zero_comm_t* comm) { delete comm; }

}  // extern "C"
