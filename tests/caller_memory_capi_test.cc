// The C ABI's calls over the caller's own memory (1.8):
// - zero_engine_set_grad: an fp32 gradient (or the other 16-bit dtype) from
//   the caller's buffer into a bf16/fp16 model equals the caller rounding
//   (zero_convert) into zero_engine_grad_buffer then grad_ready, bit for bit:
//   two engines side by side, stages 0-3, thread ranks 1-3, and off the host
//   (the CPU stand-in for a GPU); its refusals name the param.
// - zero_convert: round to nearest even checked against the neighbours of
//   each result in double precision (not against the engine's own code).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "zero_c.h"

namespace {

constexpr int64_t kRows = 40, kCols = 31, kNumel = kRows * kCols;

std::string Config(int stage, zero_dtype dtype) {
  const char* p = dtype == ZERO_DTYPE_BF16 ? R"("bf16": {"enabled": true},)"
                                           : R"("fp16": {"enabled": true, "loss_scale": 1},)";
  return std::string(R"({"steps_per_print": 0, )") + p +
         R"("optimizer": {"type": "AdamW", "params": {"lr": 0.02}},
            "zero_optimization": {"stage": )" + std::to_string(stage) +
         R"(, "stage3_param_persistence_threshold": 50, "reduce_bucket_size": 500}})";
}

std::vector<float> Grad(int rank, int t) {
  std::vector<float> g(kNumel);
  for (int64_t i = 0; i < kNumel; ++i) {
    g[i] = static_cast<float>((i * 13 + t * 7 + rank * 3) % 17 - 8) / 32.0f +
           1e-3f * std::sin(static_cast<float>(i));
  }
  return g;
}

#define OK_OR_RETURN(call)                                                          \
  do {                                                                            \
    zero_status s_ = (call);                                                      \
    if (s_ != ZERO_OK) return std::string(#call) + ": " + zero_last_error();      \
  } while (0)

std::string Make(zero_comm_t* comm, const std::string& json, bool standin, zero_dtype dtype,
                 zero_engine_t** e) {
  OK_OR_RETURN(zero_engine_create_json(json.c_str(), comm, e));
  if (standin) OK_OR_RETURN(zero_engine_set_device(*e, "cuda", 0));
  std::vector<float> init(kNumel);
  for (int64_t i = 0; i < kNumel; ++i) init[i] = static_cast<float>((i * 37) % 101) / 64.0f - 0.8f;
  int64_t shape[2] = {kRows, kCols};
  zero_param_desc d = ZERO_PARAM_DESC_INIT;
  d.name = "w";
  d.ndim = 2;
  d.shape = shape;
  d.dtype = dtype;
  d.init = init.data();
  int32_t id = -1;
  OK_OR_RETURN(zero_engine_register_param(*e, &d, &id));
  OK_OR_RETURN(zero_engine_finalize(*e));
  return "";
}

// Engines A (set_grad from fp32) and B (zero_convert + grad_buffer) on one rank.
std::string Run(zero_comm_t* ca, zero_comm_t* cb, int stage, zero_dtype dtype, bool standin,
                int rank) {
  zero_engine_t *a = nullptr, *b = nullptr;
  std::string err = Make(ca, Config(stage, dtype), standin, dtype, &a);
  if (err.empty()) err = Make(cb, Config(stage, dtype), standin, dtype, &b);
  std::vector<uint16_t> rounded(kNumel), va(kNumel), vb(kNumel);
  for (int t = 0; err.empty() && t < 3; ++t) {
    const std::vector<float> g = Grad(rank, t);
    if (t < 2) {
      err = zero_engine_set_grad(a, 0, ZERO_DTYPE_F32, g.data(), g.size() * 4) == ZERO_OK
                ? "" : std::string("set_grad: ") + zero_last_error();
      if (!err.empty()) break;
      if (zero_convert(dtype, rounded.data(), ZERO_DTYPE_F32, g.data(), g.size()) != ZERO_OK) {
        err = zero_last_error();
        break;
      }
    } else {
      // The other 16-bit dtype in: widened exactly, rounded once.
      const zero_dtype other = dtype == ZERO_DTYPE_BF16 ? ZERO_DTYPE_F16 : ZERO_DTYPE_BF16;
      std::vector<uint16_t> src(kNumel);
      std::vector<float> wide(kNumel);
      if (zero_convert(other, src.data(), ZERO_DTYPE_F32, g.data(), g.size()) != ZERO_OK ||
          zero_convert(ZERO_DTYPE_F32, wide.data(), other, src.data(), src.size()) != ZERO_OK ||
          zero_convert(dtype, rounded.data(), ZERO_DTYPE_F32, wide.data(), wide.size()) != ZERO_OK ||
          zero_engine_set_grad(a, 0, other, src.data(), src.size() * 2) != ZERO_OK) {
        err = zero_last_error();
        break;
      }
    }
    void* buf = nullptr;
    if (zero_engine_grad_buffer(b, 0, &buf) != ZERO_OK ||
        zero_engine_copy(b, buf, rounded.data(), rounded.size() * 2) != ZERO_OK ||
        zero_engine_grad_ready(b, 0) != ZERO_OK || zero_engine_step(a, nullptr) != ZERO_OK ||
        zero_engine_step(b, nullptr) != ZERO_OK) {
      err = zero_last_error();
      break;
    }
    if (zero_engine_gather_into(a, 0, dtype, va.data(), va.size() * 2) != ZERO_OK ||
        zero_engine_gather_into(b, 0, dtype, vb.data(), vb.size() * 2) != ZERO_OK ||
        zero_engine_release(a, 0) != ZERO_OK || zero_engine_release(b, 0) != ZERO_OK) {
      err = zero_last_error();
      break;
    }
    if (va != vb) err = "step " + std::to_string(t) + ": the weights differ";
  }
  zero_engine_destroy(a);
  zero_engine_destroy(b);
  return err;
}

void OnThreads(int world, int stage, zero_dtype dtype, bool standin) {
  std::vector<zero_comm_t*> ca(world), cb(world);
  ASSERT_EQ(zero_comm_create_threads(world, ca.data()), ZERO_OK);
  ASSERT_EQ(zero_comm_create_threads(world, cb.data()), ZERO_OK);
  std::vector<std::string> errs(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { errs[r] = Run(ca[r], cb[r], stage, dtype, standin, r); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errs[r], "") << "world " << world << " stage " << stage << " rank " << r;
    zero_comm_destroy(ca[r]);
    zero_comm_destroy(cb[r]);
  }
}

class SetGradBits : public ::testing::TestWithParam<std::tuple<int, int, zero_dtype>> {};

TEST_P(SetGradBits, EqualsCallerRoundingThenGradBuffer) {
  OnThreads(std::get<0>(GetParam()), std::get<1>(GetParam()), std::get<2>(GetParam()), false);
}

INSTANTIATE_TEST_SUITE_P(WorldsStagesDtypes, SetGradBits,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(ZERO_DTYPE_BF16, ZERO_DTYPE_F16)));

// Off the host: rounded on the host, uploaded into the device's buffer.
TEST(SetGrad, StandinDevice) {
  ASSERT_EQ(setenv("ZERO_GPU_STANDIN", "1", 1), 0);
  OnThreads(2, 1, ZERO_DTYPE_BF16, true);
  OnThreads(2, 3, ZERO_DTYPE_F16, true);
  unsetenv("ZERO_GPU_STANDIN");
}

TEST(SetGrad, RefusalsNameTheParam) {
  zero_comm_t* comm = nullptr;
  ASSERT_EQ(zero_comm_create_self(&comm), ZERO_OK);
  zero_engine_t* e = nullptr;
  ASSERT_EQ(Make(comm, Config(2, ZERO_DTYPE_BF16), false, ZERO_DTYPE_BF16, &e), "");
  std::vector<float> g(kNumel + 1);
  EXPECT_EQ(zero_engine_set_grad(e, 0, ZERO_DTYPE_F32, g.data(), kNumel * 4 + 4),
            ZERO_INVALID_ARGUMENT);
  EXPECT_NE(std::string(zero_last_error()).find("set_grad 'w': 4964 bytes given"),
            std::string::npos)
      << zero_last_error();
  EXPECT_NE(std::string(zero_last_error()).find("shape [40, 31]"), std::string::npos)
      << zero_last_error();
  EXPECT_EQ(zero_engine_set_grad(e, 0, static_cast<zero_dtype>(9), g.data(), 8),
            ZERO_INVALID_ARGUMENT);
  EXPECT_EQ(zero_engine_set_grad(e, 0, ZERO_DTYPE_F32, nullptr, 8), ZERO_INVALID_ARGUMENT);
  EXPECT_EQ(zero_engine_set_grad(e, 7, ZERO_DTYPE_F32, g.data(), 8), ZERO_INVALID_ARGUMENT);
  // Handed in twice in one micro-step: refused as grad_buffer refuses it.
  ASSERT_EQ(zero_engine_set_grad(e, 0, ZERO_DTYPE_F32, g.data(), kNumel * 4), ZERO_OK);
  EXPECT_NE(zero_engine_set_grad(e, 0, ZERO_DTYPE_F32, g.data(), kNumel * 4), ZERO_OK);
  zero_engine_destroy(e);
  zero_comm_destroy(comm);
}

// The value a 16-bit pattern stands for, decoded from its fields in double.
double Decode(zero_dtype t, uint16_t h) {
  const int man_bits = t == ZERO_DTYPE_BF16 ? 7 : 10, exp_bits = t == ZERO_DTYPE_BF16 ? 8 : 5;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int sign = h >> 15, e = (h >> man_bits) & ((1 << exp_bits) - 1),
            m = h & ((1 << man_bits) - 1);
  double v = e == 0 ? std::ldexp(m, 1 - bias - man_bits)
                    : std::ldexp(m + (1 << man_bits), e - bias - man_bits);
  if (e == (1 << exp_bits) - 1) v = m ? NAN : INFINITY;
  return sign ? -v : v;
}

TEST(Convert, RoundsToNearestEvenAgainstTheNeighbours) {
  std::mt19937 rng(7);
  std::vector<float> x;
  for (int i = 0; i < 20000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isfinite(f) && std::fabs(f) < 6e4f) x.push_back(f);
    x.push_back(std::ldexp(static_cast<float>(rng() % 4096) / 4096.0f + 1.0f,
                           static_cast<int>(rng() % 40) - 30));
  }
  for (zero_dtype t : {ZERO_DTYPE_BF16, ZERO_DTYPE_F16}) {
    std::vector<uint16_t> r(x.size());
    ASSERT_EQ(zero_convert(t, r.data(), ZERO_DTYPE_F32, x.data(), x.size()), ZERO_OK);
    std::vector<float> back(x.size());
    ASSERT_EQ(zero_convert(ZERO_DTYPE_F32, back.data(), t, r.data(), r.size()), ZERO_OK);
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = Decode(t, r[i]);
      ASSERT_EQ(static_cast<double>(back[i]), v) << "widening is exact";
      if (std::isinf(v)) continue;  // fp16 overflow past 65520
      // No neighbour is nearer; a tie goes to the even pattern.
      for (int d : {-1, 1}) {
        const uint16_t n = static_cast<uint16_t>((r[i] & 0x7fff) + d) | (r[i] & 0x8000);
        if ((r[i] & 0x7fff) == 0 && d < 0) continue;
        const double dv = std::fabs(Decode(t, n) - x[i]), dr = std::fabs(v - x[i]);
        ASSERT_LE(dr, dv) << x[i] << " dtype " << t;
        if (dr == dv) {
          ASSERT_EQ(r[i] & 1, 0) << "a tie to even: " << x[i];
        }
      }
    }
  }
  // fp16 overflow and NaN; equal dtypes copy; bad dtypes and NULL refused.
  const float special[3] = {65520.0f, NAN, -1e9f};
  uint16_t h[3];
  ASSERT_EQ(zero_convert(ZERO_DTYPE_F16, h, ZERO_DTYPE_F32, special, 3), ZERO_OK);
  EXPECT_EQ(h[0], 0x7c00);
  EXPECT_EQ(h[1] & 0x7c00, 0x7c00);
  EXPECT_NE(h[1] & 0x3ff, 0);
  EXPECT_EQ(h[2], 0xfc00);
  float same[3];
  ASSERT_EQ(zero_convert(ZERO_DTYPE_F32, same, ZERO_DTYPE_F32, special, 3), ZERO_OK);
  EXPECT_EQ(std::memcmp(same, special, sizeof same), 0);
  EXPECT_EQ(zero_convert(static_cast<zero_dtype>(3), h, ZERO_DTYPE_F32, special, 3),
            ZERO_INVALID_ARGUMENT);
  EXPECT_EQ(zero_convert(ZERO_DTYPE_F16, nullptr, ZERO_DTYPE_F32, special, 3),
            ZERO_INVALID_ARGUMENT);
  EXPECT_EQ(zero_convert(ZERO_DTYPE_F16, nullptr, ZERO_DTYPE_F32, nullptr, 0), ZERO_OK);
}

}  // namespace
