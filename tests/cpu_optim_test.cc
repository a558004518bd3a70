// The SIMD + OpenMP optimizer kernels are bitwise equal to the scalar math of
// kernels/adam_math.h (and the casts of kernels/cast_math.h), for every
// instruction set the dispatcher may pick, over random and edge inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hwy/targets.h"
#include "kernels/adam_math.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/optim_simd.h"

namespace zero {
namespace {

// Runs fn once per SIMD target compiled in and supported by this CPU (SSE4,
// AVX2, AVX-512, ...), forcing the dispatcher onto each in turn.
template <typename Fn>
void ForEachTarget(Fn fn) {
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(t);
    SCOPED_TRACE(hwy::TargetName(t));
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
}

struct Arrays {
  std::vector<float> g, p, m, v;
};

// Random values over many magnitudes, with edge values sprinkled in.
Arrays MakeArrays(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-40, 10);
  const float edges[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1.17549435e-38f, 65504.0f,
                         65520.0f, 3.0e38f, 1e-8f, 6.1e-5f, 5.96e-8f,
                         std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
  Arrays a;
  auto fill = [&](std::vector<float>* x, bool positive, bool finite) {
    x->resize(n);
    for (int64_t i = 0; i < n; ++i) {
      float val = std::ldexp(u(rng), e(rng));
      if (i % 97 == 13) {
        val = edges[(i / 97) % (finite ? 11 : 13)];
      }
      (*x)[i] = positive ? std::fabs(val) : val;
    }
  };
  fill(&a.g, false, false);
  fill(&a.p, false, true);
  fill(&a.m, false, true);
  fill(&a.v, true, true);
  return a;
}

bool SameBits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;  // payloads may differ
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want,
                    const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (!SameBits(got[i], want[i])) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs scalar " << want[i];
      ++bad;
    }
  }
}

struct AdamCase {
  int64_t n;
  bool decoupled;
  float weight_decay;
  DType work;
};

class AdamSimdTest : public ::testing::TestWithParam<AdamCase> {};

TEST_P(AdamSimdTest, BitwiseEqualsScalarAdamUpdate) {
  const AdamCase c = GetParam();
  ForEachTarget([&] {
  for (long long step : {1LL, 7LL, 1000LL}) {
    math::AdamScalars s = math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, c.weight_decay,
                                                c.decoupled, step, 0.37f);
    Arrays a = MakeArrays(c.n, static_cast<uint32_t>(c.n * 31 + step));
    Arrays ref = a;
    std::vector<uint16_t> ref_w16(c.n);
    for (int64_t i = 0; i < c.n; ++i) {
      math::AdamUpdate(s, ref.g[i], &ref.p[i], &ref.m[i], &ref.v[i]);
      ref_w16[i] = c.work == DType::kBF16 ? math::FloatToBf16(ref.p[i])
                                          : math::FloatToHalf(ref.p[i]);
    }
    std::vector<float> w32(c.n);
    std::vector<uint16_t> w16(c.n);
    void* work = c.work == DType::kF32 ? static_cast<void*>(w32.data()) : w16.data();
    cpu::AdamStep(s, a.g.data(), a.p.data(), a.m.data(), a.v.data(), c.n, work, c.work);
    ExpectSameBits(a.p, ref.p, "p");
    ExpectSameBits(a.m, ref.m, "m");
    ExpectSameBits(a.v, ref.v, "v");
    if (c.work == DType::kF32) {
      ExpectSameBits(w32, ref.p, "work");
    } else {
      for (int64_t i = 0; i < c.n; ++i) {
        const bool nan = std::isnan(ref.p[i]);
        if (!nan) {
          ASSERT_EQ(w16[i], ref_w16[i]) << "work[" << i << "]";
        }
      }
    }
  }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, AdamSimdTest,
    ::testing::Values(AdamCase{1, true, 0.01f, DType::kF32},
                      AdamCase{15, false, 0.0f, DType::kF32},
                      AdamCase{17, false, 0.01f, DType::kBF16},
                      AdamCase{4097, true, 0.0f, DType::kF16},
                      AdamCase{100003, true, 0.01f, DType::kF32},
                      AdamCase{100003, false, 0.01f, DType::kF16},
                      AdamCase{100003, true, 0.1f, DType::kBF16}));

TEST(SgdSimdTest, BitwiseEqualsScalarSgdUpdate) {
  ForEachTarget([&] {
  for (float momentum : {0.0f, 0.9f}) {
    for (int nesterov : {0, 1}) {
      for (int first : {0, 1}) {
        math::SgdScalars s{0.05f, momentum, 0.1f, 0.01f, 0.5f, nesterov, first};
        const int64_t n = 70001;
        Arrays a = MakeArrays(n, 5 + first);
        Arrays ref = a;
        for (int64_t i = 0; i < n; ++i) math::SgdUpdate(s, ref.g[i], &ref.p[i], &ref.m[i]);
        std::vector<float> w(n);
        cpu::SgdStep(s, a.g.data(), a.p.data(), a.m.data(), n, w.data(), DType::kF32);
        ExpectSameBits(a.p, ref.p, "p");
        ExpectSameBits(a.m, ref.m, "buf");
        ExpectSameBits(w, ref.p, "work");
      }
    }
  }
  });
}

TEST(CastSimdTest, Bf16BitwiseEqualsScalarOnAllExponents) {
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    for (uint32_t lo : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      uint32_t u = (hi << 16) | lo;
      float f;
      std::memcpy(&f, &u, 4);
      x.push_back(f);
    }
  }
  ForEachTarget([&] {
    std::vector<uint16_t> got(x.size());
    cpu::ToBf16Tile(x.data(), got.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(got[i], math::FloatToBf16(x[i])) << "input bits " << std::hex
                                                 << math::FloatBits(x[i]);
    }
  });
}

TEST(CastSimdTest, Fp16BitwiseEqualsScalarOnAllExponentsAndRoundingEdges) {
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu, 0x3000u, 0x5000u,
                        0x7fffu, 0x8000u, 0xc001u, 0xffffu}) {
      uint32_t u = (hi << 16) | lo;
      float f;
      std::memcpy(&f, &u, 4);
      x.push_back(f);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  ForEachTarget([&] {
    std::vector<uint16_t> got(x.size());
    cpu::ToF16Tile(x.data(), got.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(got[i], math::FloatToHalf(x[i])) << "input bits " << std::hex
                                                 << math::FloatBits(x[i]);
    }
  });
}

TEST(CastSimdTest, ReportsTheDispatchedTarget) {
  EXPECT_NE(std::string(cpu::SimdTargetName()), "");
  std::printf("SIMD target: %s\n", cpu::SimdTargetName());
  int count = 0;
  ForEachTarget([&] {
    std::printf("  tested: %s\n", cpu::SimdTargetName());
    ++count;
  });
  EXPECT_GE(count, 1);
}

}  // namespace
}  // namespace zero
