// Failures that must reach every rank (docs/ARCHITECTURE.md, "Failures"):
// ranks that registered different params, and a dead peer, over the thread
// communicator. Their MPI twins are //tests:mpi_mismatch_np3 and
// //tests:mpi_dead_peer_np3.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

Config Cfg(int stage) {
  Config c;
  c.stage = stage;
  c.lr = 1e-2;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 30;
  return c;
}

// A finalized engine with one param "w" of 300 elements, or nullptr (the
// failure recorded) if it could not be built: callers return on nullptr, so a
// broken setup fails the test instead of crashing it.
std::unique_ptr<Engine> OneParamEngine(const Config& c, Communicator* comm) {
  auto e = Engine::Create(c, comm);
  if (!e.ok()) {
    ADD_FAILURE() << "Engine::Create: " << e.status();
    return nullptr;
  }
  ParamSpec a;
  a.name = "w";
  a.shape = {300};
  absl::Status s = (*e)->RegisterParam(a).status();
  if (s.ok()) s = (*e)->Finalize();
  if (!s.ok()) {
    ADD_FAILURE() << "register/finalize: " << s;
    return nullptr;
  }
  return std::move(*e);
}

// Up to `steps` steps of handing in w's gradient; the first failure.
absl::Status TrySteps(Engine* e, int steps) {
  absl::Status s = absl::OkStatus();
  for (int i = 0; i < steps && s.ok(); ++i) {
    s = e->GradBuffer(0).status();
    if (s.ok()) s = e->GradReady(0);
    if (s.ok()) s = e->Step().status();
  }
  return s;
}

TEST(FailureTest, MismatchedParamsFailOnEveryRankNamingTheParam) {
  std::vector<absl::Status> st(3);
  RunThreads(3, [&](int rank, Communicator* comm) {
    Config c = Cfg(2);
    auto e = Engine::Create(c, comm);
    ASSERT_TRUE(e.ok());
    ParamSpec a;
    a.name = "w";
    a.shape = {4, 4};
    ASSERT_TRUE((*e)->RegisterParam(a).ok());
    ParamSpec b;
    b.name = "b";
    b.shape = {rank == 1 ? 5 : 4};  // rank 1 disagrees
    ASSERT_TRUE((*e)->RegisterParam(b).ok());
    st[rank] = (*e)->Finalize();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(st[r].ok());
    EXPECT_NE(st[r].message().find("param #1"), std::string::npos) << st[r];
    EXPECT_NE(st[r].message().find("'b [4] fp32 trainable'"), std::string::npos) << st[r];
    // Typed, so the C ABI reports ZERO_MISMATCH; and every rank names the
    // rank that differs (not rank 0 twice).
    EXPECT_TRUE(IsMismatch(st[r])) << st[r];
    EXPECT_NE(st[r].message().find("rank 1 has 'b [5] fp32 trainable'"), std::string::npos)
        << st[r];
  }
}

// A rank that stops taking part (dead or stuck) turns into a timeout error
// on the others within comm_timeout_seconds, not a hang.
TEST(FailureTest, DeadPeerBecomesTimeoutOnSurvivors) {
  for (int stage : {0, 2, 3}) {
    std::vector<absl::Status> st(3);
    std::vector<double> secs(3);
    RunThreads(3, [&](int rank, Communicator* comm) {
      Config c = Cfg(stage);
      c.comm_timeout_seconds = 1.0;
      std::unique_ptr<Engine> e = OneParamEngine(c, comm);
      if (e == nullptr) return;  // the failure is recorded
      if (rank == 1) return;  // dies after finalize
      auto t0 = std::chrono::steady_clock::now();
      st[rank] = TrySteps(e.get(), 3);
      secs[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Later calls fail at once, naming the earlier failure.
      auto again = e->Step();
      EXPECT_FALSE(again.ok());
    });
    for (int r : {0, 2}) {
      EXPECT_TRUE(st[r].code() == absl::StatusCode::kDeadlineExceeded ||
                  st[r].code() == absl::StatusCode::kAborted) << st[r];
      EXPECT_LT(secs[r], 10.0);
    }
  }
}

// A rank whose training step raised gives up (Communicator::Abort, what the
// C ABI's zero_comm_abort and zero.torch's exception hook call): every peer
// fails within moments naming that rank and the reason, not after the
// timeout, even though the engines talk over duplicates of the communicator.
TEST(FailureTest, AbortedRankFailsPeersPromptlyNamingIt) {
  for (int stage : {0, 2, 3}) {
    std::vector<absl::Status> st(3);
    std::vector<double> secs(3);
    RunThreads(3, [&](int rank, Communicator* comm) {
      Config c = Cfg(stage);
      c.comm_timeout_seconds = 60;
      std::unique_ptr<Engine> e = OneParamEngine(c, comm);
      if (e == nullptr) return;  // the failure is recorded
      if (rank == 2) {
        comm->Abort("ValueError: bad batch");  // the user's communicator
        return;
      }
      auto t0 = std::chrono::steady_clock::now();
      st[rank] = TrySteps(e.get(), 3);
      secs[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    for (int r : {0, 1}) {
      EXPECT_EQ(st[r].code(), absl::StatusCode::kAborted) << st[r];
      EXPECT_NE(st[r].message().find("rank 2 failed: ValueError: bad batch"), std::string::npos)
          << st[r];
      EXPECT_LT(secs[r], 5.0) << "stage " << stage;
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero
