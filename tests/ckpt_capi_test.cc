// The checkpoint calls of the C ABI (through libzero_c.so): save, load
// (latest, options, errors as status codes) and the safetensors export.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "zero_c.h"

namespace {

constexpr int kWorld = 2;
constexpr int64_t kN = 100;

std::string Dir(const char* name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

// A two-rank engine over `comm` with one param "w" [kN], trained `steps`.
zero_engine_t* Train(zero_comm_t* comm, int steps, int32_t gas = 1) {
  zero_config c = ZERO_CONFIG_INIT;
  c.stage = 2;
  c.lr = 0.1f;
  c.gradient_accumulation_steps = gas;
  c.steps_per_print = 0;
  zero_engine_t* e = nullptr;
  EXPECT_EQ(zero_engine_create(&c, comm, &e), ZERO_OK) << zero_last_error();
  std::vector<float> init(kN);
  for (int64_t i = 0; i < kN; ++i) init[i] = 0.01f * i;
  int64_t shape[1] = {kN};
  zero_param_desc d = ZERO_PARAM_DESC_INIT;
  d.name = "w";
  d.ndim = 1;
  d.shape = shape;
  d.init = init.data();
  int32_t id;
  EXPECT_EQ(zero_engine_register_param(e, &d, &id), ZERO_OK);
  EXPECT_EQ(zero_engine_finalize(e), ZERO_OK) << zero_last_error();
  for (int s = 0; s < steps; ++s) {
    void* g;
    EXPECT_EQ(zero_engine_grad_buffer(e, 0, &g), ZERO_OK);
    for (int64_t i = 0; i < kN; ++i) static_cast<float*>(g)[i] = 0.1f * ((i + s) % 7) - 0.3f;
    EXPECT_EQ(zero_engine_grad_ready(e, 0), ZERO_OK);
    EXPECT_EQ(zero_engine_step(e, nullptr), ZERO_OK) << zero_last_error();
  }
  return e;
}

void OnRanks(const std::function<void(int, zero_comm_t*)>& fn) {
  zero_comm_t* comms[kWorld];
  ASSERT_EQ(zero_comm_create_threads(kWorld, comms), ZERO_OK);
  std::vector<std::thread> ts;
  for (int r = 0; r < kWorld; ++r) ts.emplace_back([&, r] { fn(r, comms[r]); });
  for (auto& t : ts) t.join();
  for (auto* c : comms) zero_comm_destroy(c);
}

TEST(CkptCapiTest, SaveLoadLatestAndOptions) {
  const std::string dir = Dir("capi");
  OnRanks([&](int, zero_comm_t* comm) {
    zero_engine_t* a = Train(comm, 3);
    ASSERT_EQ(zero_engine_save(a, dir.c_str(), "s3"), ZERO_OK) << zero_last_error();
    std::vector<float> want(kN), got(kN);
    ASSERT_EQ(zero_engine_read_master(a, 0, want.data()), ZERO_OK);

    zero_engine_t* b = Train(comm, 0);
    ASSERT_EQ(zero_engine_load(b, dir.c_str(), nullptr, nullptr), ZERO_OK) << zero_last_error();
    ASSERT_EQ(zero_engine_read_master(b, 0, got.data()), ZERO_OK);
    EXPECT_EQ(got, want);
    zero_stats st = ZERO_STATS_INIT;
    ASSERT_EQ(zero_engine_stats(b, &st), ZERO_OK);
    EXPECT_EQ(st.global_step, 3);

    zero_load_options o = ZERO_LOAD_OPTIONS_INIT;
    o.load_optimizer_states = 0;
    EXPECT_EQ(zero_engine_load(b, dir.c_str(), "s3", &o), ZERO_OK) << zero_last_error();
    o.struct_size = 4;
    EXPECT_EQ(zero_engine_load(b, dir.c_str(), "s3", &o), ZERO_INVALID_ARGUMENT);

    EXPECT_EQ(zero_engine_load(b, dir.c_str(), "nope", nullptr), ZERO_NOT_FOUND);
    EXPECT_NE(std::string(zero_last_error()).find("nope"), std::string::npos) << zero_last_error();
    EXPECT_EQ(zero_engine_save(b, dir.c_str(), "bad/tag"), ZERO_INVALID_ARGUMENT);
    EXPECT_EQ(zero_engine_save(b, nullptr, "x"), ZERO_INVALID_ARGUMENT);
    zero_engine_destroy(a);
    zero_engine_destroy(b);
  });
}

TEST(CkptCapiTest, MidAccumulationAndCorruptionAreStatusCodes) {
  const std::string dir = Dir("capi_errors");
  OnRanks([&](int rank, zero_comm_t* comm) {
    zero_engine_t* a = Train(comm, 1, /*gas=*/2);  // one micro-step of two
    EXPECT_EQ(zero_engine_save(a, dir.c_str(), "x"), ZERO_FAILED_PRECONDITION);
    EXPECT_NE(std::string(zero_last_error()).find("micro-step"), std::string::npos);
    zero_engine_destroy(a);
    zero_engine_t* b = Train(comm, 2);
    ASSERT_EQ(zero_engine_save(b, dir.c_str(), "good"), ZERO_OK) << zero_last_error();
    zero_engine_destroy(b);
    zero_comm_barrier(comm);
    if (rank == 0) {
      std::fstream f(dir + "/good/rank_00000.bin", std::ios::in | std::ios::out | std::ios::binary);
      char b;
      f.read(&b, 1);
      b ^= 0x10;
      f.seekp(0);
      f.write(&b, 1);
    }
    zero_comm_barrier(comm);
    zero_engine_t* c = Train(comm, 0);
    EXPECT_EQ(zero_engine_load(c, dir.c_str(), "good", nullptr), ZERO_DATA_LOSS);
    EXPECT_NE(std::string(zero_last_error()).find("rank_00000.bin"), std::string::npos)
        << zero_last_error();
    zero_engine_destroy(c);
  });
}

TEST(CkptCapiTest, ExportSafetensors) {
  const std::string dir = Dir("capi_export");
  OnRanks([&](int, zero_comm_t* comm) {
    zero_engine_t* a = Train(comm, 2);
    ASSERT_EQ(zero_engine_save(a, dir.c_str(), "t"), ZERO_OK) << zero_last_error();
    zero_engine_destroy(a);
  });
  const std::string out = dir + "/w.safetensors";
  ASSERT_EQ(zero_checkpoint_export_safetensors(dir.c_str(), nullptr, out.c_str(), ZERO_DTYPE_F32),
            ZERO_OK) << zero_last_error();
  std::ifstream f(out, std::ios::binary);
  uint64_t hlen = 0;
  f.read(reinterpret_cast<char*>(&hlen), 8);
  std::string header(hlen, '\0');
  f.read(&header[0], hlen);
  EXPECT_NE(header.find("\"w\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}"),
            std::string::npos) << header;
  EXPECT_EQ(zero_checkpoint_export_safetensors(dir.c_str(), nullptr, out.c_str(), (zero_dtype)7),
            ZERO_INVALID_ARGUMENT);
  EXPECT_EQ(zero_checkpoint_export_safetensors(dir.c_str(), "missing", out.c_str(), ZERO_DTYPE_BF16),
            ZERO_NOT_FOUND);
}

}  // namespace
