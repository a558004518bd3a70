// zero_engine_gather_into_many and zero_engine_release_many (1.15) through
// the C ABI on thread ranks 1/2/3 (uneven shards at 2 and 3): bit for bit
// one call per param, trained side by side (fp32, bf16), and the refusals
// on every rank alike (gather_many_check.h; mpirun -np 2/3 in
// gather_many_mpi_np*).
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/gather_many_check.h"
#include "zero_c.h"

namespace {

using gather_many_check::Refusals;
using gather_many_check::SideBySide;

void OnThreads(int world, const std::function<std::string(zero_comm_t*, zero_comm_t*, int)>& f) {
  std::vector<zero_comm_t*> ca(world), cb(world);
  ASSERT_EQ(zero_comm_create_threads(world, ca.data()), ZERO_OK);
  ASSERT_EQ(zero_comm_create_threads(world, cb.data()), ZERO_OK);
  std::vector<std::string> errs(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { errs[r] = f(ca[r], cb[r], r); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errs[r], "") << "rank " << r << " of " << world;
    zero_comm_destroy(ca[r]);
    zero_comm_destroy(cb[r]);
  }
}

class GatherMany : public ::testing::TestWithParam<std::tuple<int, zero_dtype>> {};

TEST_P(GatherMany, EqualsSingleCalls) {
  const zero_dtype dtype = std::get<1>(GetParam());
  OnThreads(std::get<0>(GetParam()), [&](zero_comm_t* ca, zero_comm_t* cb, int r) {
    return SideBySide(ca, cb, dtype, r, 3);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldsAndDtypes, GatherMany,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(ZERO_DTYPE_F32, ZERO_DTYPE_BF16)));

TEST(GatherMany, RefusalsOnEveryRank) {
  for (int world : {1, 2, 3}) {
    OnThreads(world, [](zero_comm_t* ca, zero_comm_t*, int) { return Refusals(ca); });
  }
}

// Off the host (the stand-in for a GPU): each entry is gathered into the
// engine's buffer and copied to the caller's, the same bits.
TEST(GatherMany, StandinDevice) {
  ASSERT_EQ(setenv("ZERO_GPU_STANDIN", "1", 1), 0);
  for (int world : {2, 3}) {
    OnThreads(world, [](zero_comm_t* ca, zero_comm_t* cb, int r) {
      return SideBySide(ca, cb, ZERO_DTYPE_BF16, r, 2, true);
    });
  }
  unsetenv("ZERO_GPU_STANDIN");
}

TEST(GatherMany, NullEngine) {
  int32_t id = 0;
  EXPECT_EQ(zero_engine_gather_into_many(nullptr, &id, 0, ZERO_DTYPE_F32, nullptr, nullptr),
            ZERO_INVALID_ARGUMENT);
  EXPECT_EQ(zero_engine_release_many(nullptr, &id, 1), ZERO_INVALID_ARGUMENT);
}

}  // namespace
