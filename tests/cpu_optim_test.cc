// The SIMD + OpenMP optimizer kernels are bitwise equal to the scalar math of
// kernels/adam_math.h (and the casts of kernels/cast_math.h), for every
// instruction set the dispatcher may pick, over random and edge inputs.
#include <gtest/gtest.h>

#include <algorithm>
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
#include "kernels/cpu/widen_simd.h"
#include "kernels/norm_math.h"
#include "kernels/optim_math.h"

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

// AdamTileRaw / SgdTileRaw (the fused update's inner loops) widen fp16/bf16 gradients in
// registers: bitwise the scalar update over their fp32 values, on every
// target, including inf/NaN/subnormal gradients and the scalar tail.
TEST(AdamSimdTest, RawGradientsBitwiseEqualScalarUpdatesOfWidenedValues) {
  ForEachTarget([&] {
    for (DType gt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{4099}}) {
        const math::AdamScalars s =
            math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, true, 3, 0.37f);
        Arrays a = MakeArrays(n, static_cast<uint32_t>(n * 7 + static_cast<int>(gt)));
        std::vector<uint16_t> g16(n);
        for (int64_t i = 0; i < n; ++i) {
          if (gt == DType::kF32) continue;
          g16[i] = gt == DType::kBF16 ? math::FloatToBf16(a.g[i]) : math::FloatToHalf(a.g[i]);
          a.g[i] = gt == DType::kBF16 ? math::Bf16ToFloat(g16[i]) : math::HalfToFloat(g16[i]);
        }
        Arrays ref = a;
        for (int64_t i = 0; i < n; ++i) {
          math::AdamUpdate(s, ref.g[i], &ref.p[i], &ref.m[i], &ref.v[i]);
        }
        std::vector<float> w(n);
        const void* g = gt == DType::kF32 ? static_cast<const void*>(a.g.data()) : g16.data();
        cpu::AdamTileRaw(s, g, gt, a.p.data(), a.m.data(), a.v.data(), n, w.data());
        ExpectSameBits(a.p, ref.p, "p");
        ExpectSameBits(a.m, ref.m, "m");
        ExpectSameBits(a.v, ref.v, "v");
        ExpectSameBits(w, ref.p, "work");
        // SGD with momentum and weight decay over the same gradients.
        math::SgdScalars sg;
        sg.lr = 0.01f;
        sg.momentum = 0.9f;
        sg.dampening = 0.1f;
        sg.weight_decay = 0.01f;
        sg.grad_scale = 0.37f;
        sg.nesterov = n % 2 == 1;
        sg.first_step = false;
        std::vector<float> sp = ref.p, sb = ref.m, rp = ref.p, rb = ref.m;
        for (int64_t i = 0; i < n; ++i) math::SgdUpdate(sg, ref.g[i], &rp[i], &rb[i]);
        cpu::SgdTileRaw(sg, g, gt, sp.data(), sb.data(), n, w.data());
        ExpectSameBits(sp, rp, "sgd p");
        ExpectSameBits(sb, rb, "sgd buf");
        ExpectSameBits(w, rp, "sgd work");
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

// Lion and Adagrad through cpu::OptimizerStep: each tile of every target
// bitwise equal to math::LionUpdate / math::AdagradUpdate over the widened
// raw gradients, the working copy the master's cast, the gradients zeroed.
TEST(OptimizerStepSimdTest, LionAndAdagradBitwiseEqualScalarUpdates) {
  ForEachTarget([&] {
    for (int kind : {math::kOptimLion, math::kOptimAdagrad}) {
      for (float wd : {0.0f, 0.1f}) {
        for (DType gt : {DType::kF32, DType::kBF16, DType::kF16}) {
          SCOPED_TRACE(::testing::Message() << "kind " << kind << " wd " << wd << " grads "
                                            << DTypeName(gt));
          math::OptimScalars s{};
          s.kind = kind;
          s.lion = math::MakeLionScalars(1e-3f, 0.9f, 0.99f, wd, 0.5f);
          s.adagrad = math::MakeAdagradScalars(1e-2f, 1e-10f, wd, 0.5f);
          const int64_t n = 70001;
          Arrays a = MakeArrays(n, 11 + kind);
          std::vector<uint16_t> g16(2 * n);  // room for fp32 too
          cpu::FromF32(a.g.data(), g16.data(), gt, n);
          std::vector<float> widened(n);
          cpu::ToF32(gt == DType::kF32 ? static_cast<void*>(a.g.data()) : g16.data(), gt,
                     widened.data(), n, 1.0f);
          Arrays ref = a;
          for (int64_t i = 0; i < n; ++i) {
            if (kind == math::kOptimLion) {
              math::LionUpdate(s.lion, widened[i], &ref.p[i], &ref.m[i]);
            } else {
              math::AdagradUpdate(s.adagrad, widened[i], &ref.p[i], &ref.m[i]);
            }
          }
          void* g = gt == DType::kF32 ? static_cast<void*>(a.g.data()) : g16.data();
          std::vector<uint16_t> w(n), want(n);
          cpu::OptimizerStep(s, g, gt, a.p.data(), a.m.data(), nullptr, n, w.data(),
                             DType::kBF16, true);
          cpu::FromF32(ref.p.data(), want.data(), DType::kBF16, n);
          ExpectSameBits(a.p, ref.p, "p");
          ExpectSameBits(a.m, ref.m, "moment");
          EXPECT_EQ(w, want);
          const size_t gbytes = n * DTypeSize(gt);
          EXPECT_EQ(std::vector<char>(static_cast<char*>(g), static_cast<char*>(g) + gbytes),
                    std::vector<char>(gbytes, 0));
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

TEST(CastSimdTest, WideningBitwiseEqualsScalarOnAllHalves) {
  std::vector<uint16_t> h(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i) h[i] = static_cast<uint16_t>(i);
  ForEachTarget([&] {
    for (float scale : {1.0f, 0.37f, 1024.0f}) {
      std::vector<float> f16(h.size()), bf16(h.size());
      cpu::F16ToF32Tile(h.data(), f16.data(), h.size(), scale);
      cpu::Bf16ToF32Tile(h.data(), bf16.data(), h.size(), scale);
      for (size_t i = 0; i < h.size(); ++i) {
        const float want16 = math::HalfToFloat(h[i]) * (scale == 1.0f ? 1.0f : scale);
        const float wantb = math::Bf16ToFloat(h[i]) * (scale == 1.0f ? 1.0f : scale);
        if (std::isnan(want16)) {
          EXPECT_TRUE(std::isnan(f16[i])) << std::hex << h[i];
        } else {
          ASSERT_EQ(math::FloatBits(f16[i]), math::FloatBits(want16)) << std::hex << h[i];
        }
        if (std::isnan(wantb)) {
          EXPECT_TRUE(std::isnan(bf16[i])) << std::hex << h[i];
        } else {
          ASSERT_EQ(math::FloatBits(bf16[i]), math::FloatBits(wantb)) << std::hex << h[i];
        }
      }
      if (scale == 1.0f) {  // no multiply: NaN payloads kept too
        for (size_t i = 0; i < h.size(); ++i) {
          ASSERT_EQ(math::FloatBits(f16[i]), math::FloatBits(math::HalfToFloat(h[i])));
          ASSERT_EQ(math::FloatBits(bf16[i]), math::FloatBits(math::Bf16ToFloat(h[i])));
        }
      }
    }
  });
}

// The elementwise kernels (dtype switch per tile, SIMD casts) against the
// scalar casts of kernels/cast_math.h, element by element, with tails.
TEST(CastSimdTest, ElementwiseKernelsEqualScalarCasts) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const int64_t n = 70001;  // several tiles, a tail, threaded
    const size_t es = DTypeSize(t);
    auto load = [&](const std::vector<char>& b, int64_t i) {
      if (t == DType::kF32) return reinterpret_cast<const float*>(b.data())[i];
      const uint16_t h = reinterpret_cast<const uint16_t*>(b.data())[i];
      return t == DType::kF16 ? math::HalfToFloat(h) : math::Bf16ToFloat(h);
    };
    auto store = [&](std::vector<char>& b, int64_t i, float v) {
      if (t == DType::kF32) {
        reinterpret_cast<float*>(b.data())[i] = v;
      } else {
        reinterpret_cast<uint16_t*>(b.data())[i] =
            t == DType::kF16 ? math::FloatToHalf(v) : math::FloatToBf16(v);
      }
    };
    std::vector<float> f(n), s(n);
    for (auto& x : f) x = nd(rng);
    for (auto& x : s) x = nd(rng);
    std::vector<char> a(n * es), b(n * es);
    cpu::FromF32(f.data(), a.data(), t, n);
    cpu::FromF32(s.data(), b.data(), t, n);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<char> one(es);
      store(one, 0, f[i]);
      ASSERT_EQ(0, std::memcmp(one.data(), a.data() + i * es, es)) << i;
    }
    std::vector<float> out(n);
    cpu::ToF32(a.data(), t, out.data(), n, 0.25f);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], load(a, i) * 0.25f) << i;
    std::vector<char> acc = a;
    cpu::Accumulate(acc.data(), b.data(), t, n);
    std::vector<char> want(n * es);
    for (int64_t i = 0; i < n; ++i) store(want, i, load(a, i) + load(b, i));
    ASSERT_EQ(0, std::memcmp(acc.data(), want.data(), want.size())) << DTypeName(t);
    acc = a;
    cpu::AccumulateF32(acc.data(), s.data(), 0.5f, t, n);
    for (int64_t i = 0; i < n; ++i) store(want, i, load(a, i) + s[i] * 0.5f);
    ASSERT_EQ(0, std::memcmp(acc.data(), want.data(), want.size())) << DTypeName(t);
  }
}

// SumSquares: the order documented in cpu_kernels.h / widen_simd.h (per
// 32K-element block, 32 lanes; blocks in order), the same bits for every
// SIMD target and thread count, from any dtype alike (fp16/bf16 sum their
// fp32 values), and within rounding of an extended-precision sum.
TEST(SumSquaresTest, DeterministicBlockedOrderAcrossTargetsAndThreads) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{4097}, int64_t{32768},
                    int64_t{32769}, int64_t{300007}}) {
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    double want = 0.0;
    long double ext = 0.0L;
    for (int64_t a = 0; a < n; a += 32768) {
      double acc[32] = {};
      for (int64_t i = a; i < std::min(n, a + 32768); ++i) {
        acc[(i - a) % 32] += math::SquaredTerm(x[i]);
        ext += static_cast<long double>(x[i]) * x[i];
      }
      double block = 0.0;
      for (double v : acc) block += v;
      want += block;
    }
    if (n > 0) {
      EXPECT_NEAR(want, static_cast<double>(ext), 1e-13 * static_cast<double>(ext));
    }
    std::vector<uint16_t> h(n), b(n);
    std::vector<float> hf(n), bf(n);
    for (int64_t i = 0; i < n; ++i) {
      h[i] = math::FloatToHalf(x[i]);
      hf[i] = math::HalfToFloat(h[i]);
      b[i] = math::FloatToBf16(x[i]);
      bf[i] = math::Bf16ToFloat(b[i]);
    }
    ForEachTarget([&] {
      for (int threads : {1, 2, 3}) {
        cpu::SetThreads(threads);
        const double got = cpu::SumSquares(x.data(), DType::kF32, n);
        ASSERT_EQ(0, std::memcmp(&got, &want, sizeof(double)))
            << "n " << n << " threads " << threads;
        const double gh = cpu::SumSquares(h.data(), DType::kF16, n);
        const double wh = cpu::SumSquares(hf.data(), DType::kF32, n);
        ASSERT_EQ(0, std::memcmp(&gh, &wh, sizeof(double))) << "fp16 n " << n;
        const double gb = cpu::SumSquares(b.data(), DType::kBF16, n);
        const double wb = cpu::SumSquares(bf.data(), DType::kF32, n);
        ASSERT_EQ(0, std::memcmp(&gb, &wb, sizeof(double))) << "bf16 n " << n;
      }
      cpu::SetThreads(0);
    });
  }
  // ScaleSumSquares (stage 1's averaging folded into pass 1): the same bits
  // as the scale pass followed by SumSquares, in the array and the sum.
  for (int64_t n : {int64_t{1}, int64_t{4097}, int64_t{32769}, int64_t{300007}}) {
    for (float scale : {0.5f, 1.0f / 3.0f, 1.0f}) {
      std::vector<float> x(n);
      for (auto& v : x) v = nd(rng);
      std::vector<float> want_x = x;
      ForEachTarget([&] {
        for (int threads : {1, 3}) {
          cpu::SetThreads(threads);
          std::vector<float> got_x = x;
          cpu::ToF32(want_x.data(), DType::kF32, want_x.data(), n, scale);
          const double want = cpu::SumSquares(want_x.data(), DType::kF32, n);
          want_x = x;
          const double got = cpu::ScaleSumSquares(got_x.data(), n, scale);
          cpu::ToF32(want_x.data(), DType::kF32, want_x.data(), n, scale);
          ASSERT_EQ(0, std::memcmp(&got, &want, sizeof(double))) << "n " << n << " scale " << scale;
          ASSERT_EQ(0, std::memcmp(got_x.data(), want_x.data(), n * sizeof(float)))
              << "n " << n << " scale " << scale;
          want_x = x;
        }
        cpu::SetThreads(0);
      });
    }
  }
  // A non-finite element anywhere makes the sum non-finite.
  std::vector<float> y(100000, 1.0f);
  y[77777] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(std::isfinite(cpu::SumSquares(y.data(), DType::kF32, 100000)));
  y[77777] = std::nanf("");
  EXPECT_FALSE(std::isfinite(cpu::SumSquares(y.data(), DType::kF32, 100000)));
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
