// zero_engine_gather_into (1.7; every stage since 1.8) through the C ABI:
// bit for bit the values zero_engine_gather hands out, over thread ranks
// 1/2/3, stages 0-3, fp32/fp16/bf16 and offload_param none/cpu/nvme
// (gather_into_check.h; mpirun -np 2/3 in gather_into_mpi_np*); and its
// refusals, each naming the param: a wrong size or dtype, NULL, a release
// too many, a plain gather of a param held in caller memory, write_master
// while held, the live budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/gather_into_check.h"
#include "zero_c.h"

namespace {

using gather_into_check::Run;

std::string TmpDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

void RunOnThreads(int world, zero_dtype dtype, const std::string& offload,
                  bool standin = false, int stage = 3) {
  std::vector<zero_comm_t*> ca(world), cb(world);
  ASSERT_EQ(zero_comm_create_threads(world, ca.data()), ZERO_OK);
  ASSERT_EQ(zero_comm_create_threads(world, cb.data()), ZERO_OK);
  const std::string dir = TmpDir("gi_" + std::to_string(world) + "_" +
                                 std::to_string(static_cast<int>(dtype)) + "_" + offload +
                                 (standin ? "_standin" : "") + "_s" + std::to_string(stage));
  std::vector<std::string> errs(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { errs[r] = Run(ca[r], cb[r], dtype, offload, dir, r, 3, standin, stage); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errs[r], "") << "rank " << r;
    zero_comm_destroy(ca[r]);
    zero_comm_destroy(cb[r]);
  }
}

class GatherIntoBits : public ::testing::TestWithParam<std::tuple<int, zero_dtype>> {};

TEST_P(GatherIntoBits, EqualsGather) {
  RunOnThreads(std::get<0>(GetParam()), std::get<1>(GetParam()), "");
}

INSTANTIATE_TEST_SUITE_P(WorldsAndDtypes, GatherIntoBits,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(ZERO_DTYPE_F32, ZERO_DTYPE_F16,
                                                              ZERO_DTYPE_BF16)));

// Stages 0-2 keep every param whole: gather_into copies the resident
// working copy, the same bits as gather, so one caller code path serves
// every stage.
class GatherIntoBelowStage3 : public ::testing::TestWithParam<std::tuple<int, int, zero_dtype>> {};

TEST_P(GatherIntoBelowStage3, EqualsGather) {
  RunOnThreads(std::get<1>(GetParam()), std::get<2>(GetParam()), "", false,
               std::get<0>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(StagesWorldsAndDtypes, GatherIntoBelowStage3,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values(1, 2, 3),
                                            ::testing::Values(ZERO_DTYPE_F32, ZERO_DTYPE_F16,
                                                              ZERO_DTYPE_BF16)));

TEST(GatherInto, OffloadParamCpu) {
  RunOnThreads(2, ZERO_DTYPE_F32, "cpu");
  RunOnThreads(3, ZERO_DTYPE_BF16, "cpu");
}

TEST(GatherInto, OffloadParamNvme) {
  RunOnThreads(2, ZERO_DTYPE_BF16, "nvme");
  RunOnThreads(3, ZERO_DTYPE_F32, "nvme");
}

// Off the host (the CPU stand-in for a GPU, whose memory the host cannot
// touch): gathered into the engine's buffer and copied out, the same bits;
// with offload_param cpu the shard lives in host memory there.
TEST(GatherInto, StandinDevice) {
  ASSERT_EQ(setenv("ZERO_GPU_STANDIN", "1", 1), 0);
  RunOnThreads(2, ZERO_DTYPE_F32, "", true);
  RunOnThreads(3, ZERO_DTYPE_BF16, "", true);
  RunOnThreads(2, ZERO_DTYPE_BF16, "cpu", true);
  RunOnThreads(2, ZERO_DTYPE_BF16, "", true, 1);
  RunOnThreads(3, ZERO_DTYPE_F32, "", true, 2);
  unsetenv("ZERO_GPU_STANDIN");
}

// One rank, one param "w" of 64 x 32 (and "b", 8 elements, persistent).
struct One {
  zero_comm_t* comm = nullptr;
  zero_engine_t* engine = nullptr;
  explicit One(const std::string& json) {
    EXPECT_EQ(zero_comm_create_self(&comm), ZERO_OK);
    EXPECT_EQ(zero_engine_create_json(json.c_str(), comm, &engine), ZERO_OK) << zero_last_error();
    zero_dtype dtype = ZERO_DTYPE_F32;
    EXPECT_EQ(zero_engine_dtype(engine, &dtype), ZERO_OK);
    int64_t shape[2] = {64, 32};
    int64_t bshape[1] = {8};
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "w";
    d.ndim = 2;
    d.shape = shape;
    d.dtype = dtype;
    int32_t id = -1;
    EXPECT_EQ(zero_engine_register_param(engine, &d, &id), ZERO_OK);
    d.name = "b";
    d.ndim = 1;
    d.shape = bshape;
    EXPECT_EQ(zero_engine_register_param(engine, &d, &id), ZERO_OK);
    EXPECT_EQ(zero_engine_finalize(engine), ZERO_OK) << zero_last_error();
  }
  ~One() {
    zero_engine_destroy(engine);
    zero_comm_destroy(comm);
  }
};

void ExpectError(zero_status got, zero_status want, const std::string& needle) {
  EXPECT_EQ(got, want) << zero_last_error();
  EXPECT_NE(std::string(zero_last_error()).find(needle), std::string::npos)
      << "'" << zero_last_error() << "' lacks '" << needle << "'";
}

const char* kStage3 = R"({"steps_per_print": 0, "zero_optimization": {"stage": 3,
    "stage3_param_persistence_threshold": 10}})";

// Stages 0-2: a copy, held like a gather (release ends it; write_master
// refuses the param meanwhile), counted in no live bytes.
TEST(GatherInto, BelowStage3IsAHeldCopy) {
  for (int stage = 0; stage < 3; ++stage) {
    One one(R"({"steps_per_print": 0, "zero_optimization": {"stage": )" +
            std::to_string(stage) + "}}");
    std::vector<float> values(64 * 32), dst(64 * 32, -1.0f);
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i);
    ASSERT_EQ(zero_engine_write_master(one.engine, 0, values.data()), ZERO_OK);
    ASSERT_EQ(zero_engine_gather_into(one.engine, 0, ZERO_DTYPE_F32, dst.data(), dst.size() * 4),
              ZERO_OK)
        << zero_last_error();
    EXPECT_EQ(dst, values) << "stage " << stage;
    ExpectError(zero_engine_write_master(one.engine, 0, values.data()), ZERO_FAILED_PRECONDITION,
                "'w': the param is gathered");
    zero_stats s = ZERO_STATS_INIT;
    ASSERT_EQ(zero_engine_stats(one.engine, &s), ZERO_OK);
    EXPECT_EQ(s.live_gathered_bytes, 0);
    EXPECT_EQ(zero_engine_release(one.engine, 0), ZERO_OK);
    ExpectError(zero_engine_release(one.engine, 0), ZERO_FAILED_PRECONDITION,
                "release 'w': not gathered");
  }
}

TEST(GatherInto, WrongSizeDtypeOrNull) {
  One one(R"({"steps_per_print": 0, "bf16": {"enabled": true},
              "zero_optimization": {"stage": 3}})");
  std::vector<uint16_t> dst(64 * 32 + 1);
  ExpectError(zero_engine_gather_into(one.engine, 0, ZERO_DTYPE_BF16, dst.data(), 64 * 32 * 2 + 2),
              ZERO_INVALID_ARGUMENT, "gather_into 'w': 4098 bytes given");
  ExpectError(zero_engine_gather_into(one.engine, 0, ZERO_DTYPE_BF16, dst.data(), 64 * 32 * 2 - 2),
              ZERO_INVALID_ARGUMENT, "take 4096");
  // fp16 and bf16 are both 2 bytes: the size alone would not catch it.
  ExpectError(zero_engine_gather_into(one.engine, 0, ZERO_DTYPE_F16, dst.data(), 64 * 32 * 2),
              ZERO_INVALID_ARGUMENT, "gather_into 'w': the param is bf16, not fp16");
  ExpectError(zero_engine_gather_into(one.engine, 0, static_cast<zero_dtype>(7), dst.data(),
                                      64 * 32 * 2),
              ZERO_INVALID_ARGUMENT, "dtype 7");
  ExpectError(zero_engine_gather_into(one.engine, 0, ZERO_DTYPE_BF16, nullptr, 64 * 32 * 2),
              ZERO_INVALID_ARGUMENT, "zero_engine_gather_into");
  ExpectError(zero_engine_gather_into(one.engine, 5, ZERO_DTYPE_BF16, dst.data(), 64 * 32 * 2),
              ZERO_INVALID_ARGUMENT, "gather_into");
  // None of these counted as a gather.
  ExpectError(zero_engine_release(one.engine, 0), ZERO_FAILED_PRECONDITION,
              "release 'w': not gathered");
}

TEST(GatherInto, HeldInCallerMemoryLikeAGather) {
  One one(kStage3);
  std::vector<float> dst(64 * 32, -1.0f), again(64 * 32, -2.0f), bias(8, -1.0f);
  ASSERT_EQ(zero_engine_gather_into(one.engine, 0, ZERO_DTYPE_F32, dst.data(), dst.size() * 4),
            ZERO_OK)
      << zero_last_error();
  for (float v : dst) ASSERT_EQ(v, 0.0f);  // registered without init: zeros
  // The engine has no copy of its own to hand out.
  void* p = nullptr;
  ExpectError(zero_engine_gather(one.engine, 0, &p), ZERO_FAILED_PRECONDITION,
              "gather 'w': it is held in the caller's memory by gather_into");
  // Gathered: write_master refuses it.
  std::vector<float> values(64 * 32, 1.5f);
  EXPECT_NE(zero_engine_write_master(one.engine, 0, values.data()), ZERO_OK);
  // Nested: copied from the first buffer.
  dst[5] = 42.0f;  // (the contract says leave it; here it shows where the copy comes from)
  ASSERT_EQ(zero_engine_gather_into(one.engine, 0, ZERO_DTYPE_F32, again.data(), again.size() * 4),
            ZERO_OK);
  EXPECT_EQ(again[5], 42.0f);
  zero_stats s = ZERO_STATS_INIT;
  ASSERT_EQ(zero_engine_stats(one.engine, &s), ZERO_OK);
  EXPECT_EQ(s.live_gathered_bytes, 64 * 32 * 4);
  EXPECT_EQ(zero_engine_release(one.engine, 0), ZERO_OK);
  EXPECT_EQ(zero_engine_release(one.engine, 0), ZERO_OK);
  ExpectError(zero_engine_release(one.engine, 0), ZERO_FAILED_PRECONDITION,
              "release 'w': not gathered");
  ASSERT_EQ(zero_engine_stats(one.engine, &s), ZERO_OK);
  EXPECT_EQ(s.live_gathered_bytes, 0);
  // Released: write_master takes it, and the next gather_into sees it.
  ASSERT_EQ(zero_engine_write_master(one.engine, 0, values.data()), ZERO_OK) << zero_last_error();
  ASSERT_EQ(zero_engine_gather_into(one.engine, 0, ZERO_DTYPE_F32, dst.data(), dst.size() * 4),
            ZERO_OK);
  for (float v : dst) ASSERT_EQ(v, 1.5f);
  EXPECT_EQ(zero_engine_release(one.engine, 0), ZERO_OK);
  // A plain gather first, then gather_into nested: copied from the engine's buffer.
  ASSERT_EQ(zero_engine_gather(one.engine, 0, &p), ZERO_OK);
  std::fill(dst.begin(), dst.end(), 0.0f);
  ASSERT_EQ(zero_engine_gather_into(one.engine, 0, ZERO_DTYPE_F32, dst.data(), dst.size() * 4),
            ZERO_OK);
  EXPECT_EQ(std::memcmp(p, dst.data(), dst.size() * 4), 0);
  EXPECT_EQ(zero_engine_release(one.engine, 0), ZERO_OK);
  EXPECT_EQ(zero_engine_release(one.engine, 0), ZERO_OK);
  // A persistent param: copied from its resident copy, released alike.
  ASSERT_EQ(zero_engine_gather_into(one.engine, 1, ZERO_DTYPE_F32, bias.data(), 32), ZERO_OK);
  for (float v : bias) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(zero_engine_release(one.engine, 1), ZERO_OK);
  ExpectError(zero_engine_release(one.engine, 1), ZERO_FAILED_PRECONDITION, "release 'b'");
}

TEST(GatherInto, LiveBudgetCountsCallerMemory) {
  // 3000 elements: "w" (2048) fits once, not twice with another.
  One one(R"({"steps_per_print": 0, "zero_optimization": {"stage": 3,
      "stage3_param_persistence_threshold": 0, "stage3_max_live_parameters": 3000}})");
  std::vector<float> w(64 * 32), b(8);
  ASSERT_EQ(zero_engine_gather_into(one.engine, 0, ZERO_DTYPE_F32, w.data(), w.size() * 4),
            ZERO_OK)
      << zero_last_error();
  ASSERT_EQ(zero_engine_gather_into(one.engine, 1, ZERO_DTYPE_F32, b.data(), 32), ZERO_OK);
  EXPECT_EQ(zero_engine_release(one.engine, 1), ZERO_OK);
  // Held in caller memory, "w" still counts: a plain gather of a param that
  // would take the live set past the budget is refused, naming it.
  EXPECT_EQ(zero_engine_release(one.engine, 0), ZERO_OK);
  One two(R"({"steps_per_print": 0, "zero_optimization": {"stage": 3,
      "stage3_param_persistence_threshold": 0, "stage3_max_live_parameters": 2050}})");
  ASSERT_EQ(zero_engine_gather_into(two.engine, 0, ZERO_DTYPE_F32, w.data(), w.size() * 4),
            ZERO_OK);
  void* p = nullptr;
  ExpectError(zero_engine_gather(two.engine, 1, &p), ZERO_OUT_OF_MEMORY,
              "gather 'b': stage3_max_live_parameters = 2050");
  ExpectError(zero_engine_gather_into(two.engine, 1, ZERO_DTYPE_F32, b.data(), 32),
              ZERO_OUT_OF_MEMORY, "gather 'b'");
  EXPECT_EQ(zero_engine_release(two.engine, 0), ZERO_OK);
  ASSERT_EQ(zero_engine_gather_into(two.engine, 1, ZERO_DTYPE_F32, b.data(), 32), ZERO_OK);
  EXPECT_EQ(zero_engine_release(two.engine, 1), ZERO_OK);
}

}  // namespace
