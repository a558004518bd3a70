// Training the MLP on the guarded stand-in device (core/device/guarded_device.h)
// over thread ranks, through the plain, staging or NCCL-shaped communicator,
// and comparing with the plain CPU engine bit for bit: shared by
// standin_device_test and standin_offload_test.
#ifndef ZERO_TESTS_TESTING_STANDIN_TRAINING_H_
#define ZERO_TESTS_TESTING_STANDIN_TRAINING_H_

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend/standin_comm.h"
#include "core/device/guarded_device.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {

inline Config Cfg(int stage, DType t) {
  Config c = SmallMlpConfig(stage, t);
  c.comm_timeout_seconds = 60;
  return c;
}

inline void CallerCopy(Device* d, void* dst, const void* src, size_t n) {
  auto* g = dynamic_cast<GuardedDevice*>(d);
  ASSERT_NE(g, nullptr) << "the engine is not on the stand-in device";
  g->CallerCopy(dst, src, n);
}

inline MlpSpec StandinSpec() {
  MlpSpec s;
  s.steps = 6;
  s.make_device = [] { return std::unique_ptr<Device>(MakeGuardedDevice()); };
  s.caller_copy = CallerCopy;
  return s;
}

enum class CommKind { kThread, kStaging, kNcclShaped };

// `drop_wait`: the NCCL-shaped communicator never learns the compute stream
// (what the device factory did before fix 1).
class NoWaitComm : public Communicator {
 public:
  explicit NoWaitComm(std::unique_ptr<Communicator> c) : c_(std::move(c)) {}
  int rank() const override { return c_->rank(); }
  int world_size() const override { return c_->world_size(); }
  std::string backend_name() const override { return c_->backend_name(); }
  bool device_memory() const override { return true; }
  void set_wait_stream(void*) override {}
  absl::Status AllGatherV(const void* s, void* r, const std::vector<int64_t>& c,
                          DType t) override {
    return c_->AllGatherV(s, r, c, t);
  }
  absl::Status ReduceScatterV(const float* s, float* r, const std::vector<int64_t>& c) override {
    return c_->ReduceScatterV(s, r, c);
  }
  absl::Status AllReduce(float* d, int64_t n, ReduceOp op) override { return c_->AllReduce(d, n, op); }
  absl::Status AllReduce(double* d, int64_t n, ReduceOp op) override { return c_->AllReduce(d, n, op); }
  absl::Status Broadcast(void* d, int64_t b, int root) override { return c_->Broadcast(d, b, root); }
  absl::Status Barrier() override { return c_->Barrier(); }
  void Abort(const std::string& r) override { c_->Abort(r); }
  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override {
    auto d = c_->Duplicate();
    if (!d.ok()) return d.status();
    return std::unique_ptr<Communicator>(std::make_unique<NoWaitComm>(std::move(*d)));
  }

 private:
  std::unique_ptr<Communicator> c_;
};

inline std::vector<absl::StatusOr<MlpResult>> TrainOn(const Config& c, int world,
                                                  const MlpSpec& spec, CommKind kind,
                                                  bool drop_wait = false) {
  std::vector<absl::StatusOr<MlpResult>> out(world, absl::UnknownError("not run"));
  std::mutex mu;
  RunThreads(world, [&](int rank, Communicator* comm) {
    absl::StatusOr<MlpResult> r;
    if (kind == CommKind::kNcclShaped) {
      auto dup = comm->Duplicate();
      ASSERT_TRUE(dup.ok());
      std::unique_ptr<Communicator> nccl = MakeStandinDeviceComm(std::move(*dup));
      if (drop_wait) nccl = std::make_unique<NoWaitComm>(std::move(nccl));
      r = TrainMlp(c, nccl.get(), spec);
    } else {
      r = TrainMlp(c, comm, spec);
    }
    std::lock_guard<std::mutex> l(mu);
    out[rank] = std::move(r);
  });
  return out;
}

// Params and every step's norm, bit for bit.
inline void ExpectSame(const std::vector<absl::StatusOr<MlpResult>>& got,
                const std::vector<MlpResult>& ref, const std::string& what) {
  for (size_t r = 0; r < ref.size(); ++r) {
    ASSERT_TRUE(got[r].ok()) << what << " rank " << r << ": " << got[r].status();
    EXPECT_EQ(MaxRelDiff(*got[r], ref[r]), 0.0) << what << " rank " << r;
    ASSERT_EQ(got[r]->steps.size(), ref[r].steps.size()) << what;
    for (size_t i = 0; i < ref[r].steps.size(); ++i) {
      EXPECT_EQ(got[r]->steps[i].grad_norm, ref[r].steps[i].grad_norm) << what << " step " << i;
      EXPECT_EQ(got[r]->steps[i].skipped, ref[r].steps[i].skipped) << what << " step " << i;
    }
  }
}

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_STANDIN_TRAINING_H_
