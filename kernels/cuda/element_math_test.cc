// Host tests of the per-element bodies the CUDA kernels run (kernels/
// fused_math.h over cast_math.h, adam_math.h, norm_math.h), against
// references written here independently: rounding by scaling in double and
// nearbyint (round-half-even), decoding by ldexp, Adam in double.
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "kernels/fused_math.h"

namespace zero {
namespace math {
namespace {

uint32_t Bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float FromBits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Rounds |a| (finite, >= 0) to a binary format with `mant_bits` stored
// mantissa bits and minimum normal exponent `emin`, ties to even.
double RoundToFormat(double a, int mant_bits, int emin) {
  if (a == 0.0) return 0.0;
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int E = std::max(e - 1, emin);
  double unit = std::ldexp(1.0, E - mant_bits);
  return std::nearbyint(a / unit) * unit;  // a / unit is exact
}

// Independent binary16 encoder of a double that is exactly representable.
uint16_t EncodeHalf(bool neg, double r) {
  uint16_t s = neg ? 0x8000 : 0;
  if (r >= 65536.0) return s | 0x7c00;
  if (r < std::ldexp(1.0, -14)) return s | (uint16_t)(r / std::ldexp(1.0, -24));
  int e;
  std::frexp(r, &e);
  int E = e - 1;
  uint16_t mant = (uint16_t)(r / std::ldexp(1.0, E - 10) - 1024.0);
  return s | (uint16_t)((E + 15) << 10) | mant;
}

uint16_t RefHalf(float f) {
  bool neg = std::signbit(f);
  double a = std::fabs((double)f);
  if (std::isinf(a)) return (neg ? 0x8000 : 0) | 0x7c00;
  return EncodeHalf(neg, RoundToFormat(a, 10, -14));
}

double RefHalfValue(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return m ? std::nan("") : s * INFINITY;
  if (e == 0) return s * std::ldexp((double)m, -24);
  return s * std::ldexp(1024.0 + m, e - 25);
}

uint16_t RefBf16(float f) {
  bool neg = std::signbit(f);
  double a = std::fabs((double)f);
  if (std::isinf(a)) return (neg ? 0x8000 : 0) | 0x7f80;
  double r = RoundToFormat(a, 7, -126);
  if (r >= std::ldexp(1.0, 128)) return (neg ? 0x8000 : 0) | 0x7f80;
  uint32_t u = Bits((float)r);
  EXPECT_EQ(u & 0xffffu, 0u) << "reference produced a non-bf16 value";
  return (uint16_t)((neg ? 0x8000 : 0) | (u >> 16));
}

double RefBf16Value(uint16_t h) { return (double)FromBits((uint32_t)h << 16); }

bool HalfIsNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
bool Bf16IsNan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

// Every float that matters for fp16 rounding: each half value, the exact
// midpoints between neighbours, one float ulp either side of each, plus
// random bit patterns.
std::vector<float> HalfProbeFloats() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    float lo = (float)RefHalfValue((uint16_t)h);
    float hi = (float)RefHalfValue((uint16_t)(h + 1));  // 0x7c00 is inf
    float mid = h + 1 == 0x7c00 ? 65520.0f : (float)(0.5 * ((double)lo + hi));
    for (float x : {lo, mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, INFINITY)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) v.push_back(FromBits(rng()));
  return v;
}

TEST(CastMath, HalfDecodeMatchesLdexpForAll65536Values) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float got = HalfToFloat((uint16_t)h);
    double want = RefHalfValue((uint16_t)h);
    if (HalfIsNan((uint16_t)h)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      EXPECT_EQ(Bits(got), Bits((float)want)) << std::hex << h;  // keeps -0
    }
  }
}

TEST(CastMath, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t back = FloatToHalf(HalfToFloat((uint16_t)h));
    if (HalfIsNan((uint16_t)h)) {
      EXPECT_TRUE(HalfIsNan(back)) << std::hex << h;
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(CastMath, FloatToHalfRoundsToNearestEvenLikeReference) {
  for (float f : HalfProbeFloats()) {
    uint16_t got = FloatToHalf(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(HalfIsNan(got));
    } else {
      ASSERT_EQ(got, RefHalf(f)) << std::hexfloat << f;
    }
  }
}

TEST(CastMath, HalfEdgeValues) {
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);   // tie rounds up to inf
  EXPECT_EQ(FloatToHalf(-65520.0f), 0xfc00);
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // min subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (0)
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // tie to even (2)
  EXPECT_EQ(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // min normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.5f, -24)), 0x0400);  // subnormal->normal
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie, even
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_TRUE(HalfIsNan(FloatToHalf(NAN)));
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);  // float subnormal-ish range -> 0
  EXPECT_EQ(FloatToHalf(FromBits(0x00000001u)), 0x0000);  // float subnormal
}

TEST(CastMath, EveryBf16RoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = Bf16ToFloat((uint16_t)h);
    if (Bf16IsNan((uint16_t)h)) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(Bf16IsNan(FloatToBf16(f)));
    } else {
      EXPECT_EQ(Bits(f), Bits((float)RefBf16Value((uint16_t)h)));
      EXPECT_EQ(FloatToBf16(f), h) << std::hex << h;
    }
  }
}

TEST(CastMath, FloatToBf16RoundsToNearestEvenLikeReference) {
  std::vector<float> probes;
  for (uint32_t h = 0; h < 0x7f80; ++h) {
    uint32_t u = h << 16;
    for (uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      probes.push_back(FromBits(u | low));
      probes.push_back(FromBits(u | low | 0x80000000u));
    }
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 1000000; ++i) probes.push_back(FromBits(rng()));
  for (float f : probes) {
    if (std::isnan(f)) {
      EXPECT_TRUE(Bf16IsNan(FloatToBf16(f)));
    } else {
      ASSERT_EQ(FloatToBf16(f), RefBf16(f)) << std::hexfloat << f;
    }
  }
}

TEST(CastMath, Bf16EdgeValues) {
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie -> even
  EXPECT_EQ(FloatToBf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)),
            0x3f81);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // inf
  EXPECT_EQ(FloatToBf16(FromBits(0x7f7f7fffu)), 0x7f7f);  // largest finite
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000u)), 0x0000);  // subnormal tie
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(FloatToBf16(-INFINITY), 0xff80);
  EXPECT_TRUE(Bf16IsNan(FloatToBf16(FromBits(0x7f800001u))));  // sNaN stays NaN
}

TEST(CastMath, CrossCastsBetweenHalfAndBf16MatchComposedReference) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t b = CastElement<F16Storage, BF16Storage>((uint16_t)h);
    uint16_t f = CastElement<BF16Storage, F16Storage>((uint16_t)h);
    if (HalfIsNan((uint16_t)h)) {
      EXPECT_TRUE(Bf16IsNan(b));
    } else {
      EXPECT_EQ(b, RefBf16((float)RefHalfValue((uint16_t)h))) << std::hex << h;
    }
    if (Bf16IsNan((uint16_t)h)) {
      EXPECT_TRUE(HalfIsNan(f));
    } else {
      EXPECT_EQ(f, RefHalf((float)RefBf16Value((uint16_t)h))) << std::hex << h;
    }
  }
  EXPECT_EQ(Bits(CastElement<F32Storage, F32Storage>(-0.0f)), 0x80000000u);
}

// ---- Adam ----

struct RefAdam {
  double p, m, v;
};

RefAdam RefAdamStep(double lr, double b1, double b2, double eps, double wd,
                    bool decoupled, int step, double scale, double g, double p,
                    double m, double v) {
  double grad = g * scale;
  if (!decoupled) grad += wd * p;
  double mm = b1 * m + (1 - b1) * grad;
  double vv = b2 * v + (1 - b2) * grad * grad;
  double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
  double upd = (mm / bc1) / (std::sqrt(vv) / std::sqrt(bc2) + eps);
  if (decoupled) upd += wd * p;
  return {p - lr * upd, mm, vv};
}

void ExpectClose(float got, double want, double scale_hint) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got));
    return;
  }
  double tol = 4e-6 * std::max(std::fabs(want), scale_hint) + 1e-37;
  EXPECT_NEAR((double)got, want, tol);
}

TEST(AdamMath, FusedBodyMatchesDoubleReferenceAndCastsTheNewMaster) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int decoupled = 0; decoupled < 2; ++decoupled) {
    for (int step : {1, 2, 10, 1000}) {
      AdamScalars s = MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f,
                                      decoupled, step, 1.0f / 128);
      for (int i = 0; i < 20000; ++i) {
        uint16_t gh = FloatToHalf(u(rng) * 1000.0f);
        float p = u(rng), m = u(rng) * 0.1f, v = std::fabs(u(rng)) * 0.01f;
        RefAdam r = RefAdamStep(1e-3, 0.9f, 0.999f, 1e-8f, 0.01f, decoupled,
                                step, 1.0 / 128, RefHalfValue(gh), p, m, v);
        float p2 = p, m2 = m, v2 = v;
        uint16_t w = AdamCastElement<F16Storage, BF16Storage>(s, gh, &p2, &m2,
                                                             &v2);
        // Tolerances scale with the operands (p - lr*update cancels).
        double g = RefHalfValue(gh) / 128;
        ExpectClose(p2, r.p, std::fabs(p) + std::fabs(r.p - p));
        ExpectClose(m2, r.m, std::fabs(m) + 0.1 * std::fabs(g) + 0.01 * std::fabs(p));
        ExpectClose(v2, r.v, v + 0.001 * (std::fabs(g) + std::fabs(p)) * (std::fabs(g) + std::fabs(p)));
        EXPECT_EQ(w, RefBf16(p2));
      }
    }
  }
}

TEST(AdamMath, NonFiniteGradientPoisonsParamAndWorkingCopy) {
  AdamScalars s = MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1, 1.0f);
  for (uint16_t g : {(uint16_t)0x7c00, (uint16_t)0xfc00, (uint16_t)0x7e00}) {
    float p = 0.5f, m = 0.0f, v = 0.0f;
    uint16_t w = AdamCastElement<F16Storage, F16Storage>(s, g, &p, &m, &v);
    EXPECT_TRUE(std::isnan(p)) << g;  // inf/inf or NaN
    EXPECT_TRUE(HalfIsNan(w));
  }
}

TEST(AdamMath, WorkingCopyOverflowsAtHalfMaxAndKeepsNegativeZero) {
  AdamScalars s = MakeAdamScalars(0.0f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1, 1.0f);
  float p = 65504.0f, m = 0, v = 0;
  EXPECT_EQ((AdamCastElement<F32Storage, F16Storage>(s, 0.0f, &p, &m, &v)),
            0x7bff);
  p = 65520.0f;
  EXPECT_EQ((AdamCastElement<F32Storage, F16Storage>(s, 0.0f, &p, &m, &v)),
            0x7c00);
  p = -0.0f;
  EXPECT_EQ((AdamCastElement<F32Storage, F16Storage>(s, 0.0f, &p, &m, &v)),
            0x8000);
  EXPECT_TRUE(std::signbit(p));
}

TEST(AdamMath, SubnormalHalfGradientsAreNotFlushed) {
  AdamScalars s = MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-30f, 0.0f, 1, 1,
                                  1.0f);
  float p = 1.0f, m = 0, v = 0;
  AdamCastElement<F16Storage, F32Storage>(s, 0x0001, &p, &m, &v);
  EXPECT_GT(m, 0.0f);  // 0.1 * 2^-24
  EXPECT_LT(p, 1.0f);  // sign step of size ~lr
  EXPECT_NEAR(p, 1.0f - 1e-3f, 1e-6f);
}

// ---- SGD ----

TEST(SgdMath, FusedBodyMatchesTorchSgdInDouble) {
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    for (int first = 0; first < 2; ++first) {
      SgdScalars s{0.1f, 0.9f, 0.1f, 0.01f, 0.5f, nesterov, first};
      float p = 0.75f, buf = 0.2f;
      double g = 0.3 * 0.5 + 0.01 * 0.75;
      double b = first ? g : 0.9 * 0.2 + (1 - 0.1) * g;
      double step = nesterov ? g + 0.9 * b : b;
      uint16_t w = SgdCastElement<F16Storage>(s, 0.3f, &p, &buf);
      EXPECT_NEAR(p, 0.75 - 0.1 * step, 1e-7);
      EXPECT_NEAR(buf, b, 1e-7);
      EXPECT_EQ(w, RefHalf(p));
    }
  }
  SgdScalars plain{0.5f, 0.0f, 0.0f, 0.0f, 1.0f, 0, 0};
  float p = 1.0f, unused = 0.0f;
  EXPECT_EQ((SgdCastElement<BF16Storage>(plain, INFINITY, &p, &unused)), 0xff80);
}

// ---- Gradient accumulation ----

TEST(AccumulateMath, HalfAndBf16SumsRoundOnceFromTheFp32Sum) {
  std::mt19937 rng(17);
  for (int i = 0; i < 1000000; ++i) {
    uint16_t a = (uint16_t)rng(), b = (uint16_t)rng();
    uint16_t h = AccumulateElement<F16Storage>(a, b);
    double ha = RefHalfValue(a), hb = RefHalfValue(b);
    if (std::isnan(ha + hb)) {
      EXPECT_TRUE(HalfIsNan(h));
    } else {
      ASSERT_EQ(h, RefHalf((float)(ha + hb))) << a << " " << b;
    }
    uint16_t z = AccumulateElement<BF16Storage>(a, b);
    double za = RefBf16Value(a), zb = RefBf16Value(b);
    if (std::isnan(za + zb)) {
      EXPECT_TRUE(Bf16IsNan(z));
    } else {
      ASSERT_EQ(z, RefBf16((float)(za + zb))) << a << " " << b;
    }
  }
  EXPECT_EQ(AccumulateElement<F16Storage>(0x7bff, 0x4c00), 0x7c00);  // 65504+16
  EXPECT_EQ(AccumulateElement<F16Storage>(0x8000, 0x8000), 0x8000);  // -0 + -0
  EXPECT_EQ(AccumulateElement<F16Storage>(0x8000, 0x0000), 0x0000);  // -0 + 0
  EXPECT_TRUE(HalfIsNan(AccumulateElement<F16Storage>(0x7c00, 0xfc00)));
  EXPECT_EQ(AccumulateElement<F16Storage>(0x0001, 0x0001), 0x0002);  // subnormal
}

TEST(AccumulateMath, ScaledFp32SourceRoundsProductThenSum) {
  std::mt19937 rng(19);
  std::uniform_real_distribution<float> u(-100, 100);
  for (int i = 0; i < 200000; ++i) {
    uint16_t d = FloatToBf16(u(rng));
    float src = u(rng), scale = u(rng) * 0.01f;
    float prod = (float)((double)src * scale);
    float sum = (float)(RefBf16Value(d) + prod);
    ASSERT_EQ(AccumulateScaledElement<BF16Storage>(d, src, scale), RefBf16(sum));
  }
  EXPECT_EQ(Bits(AccumulateScaledElement<F32Storage>(-0.0f, -0.0f, 1.0f)),
            0x80000000u);
}

// ---- Unscale + non-finite ----

TEST(UnscaleMath, EveryHalfGradientUnscalesExactlyAndFlagsNonFinite) {
  const float factor = 1.0f / 1024;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    int flag = 0;
    float g = HalfToFloat((uint16_t)h);
    float out = UnscaleElement(g, factor, &flag);
    double want = RefHalfValue((uint16_t)h) / 1024.0;  // exact in fp32
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out));
    } else {
      EXPECT_EQ(Bits(out), Bits((float)want)) << std::hex << h;
    }
    EXPECT_EQ(flag, std::isfinite(want) ? 0 : 1) << std::hex << h;
  }
}

TEST(UnscaleMath, OverflowOfTheProductIsFlaggedAndFlagIsSticky) {
  int flag = 0;
  EXPECT_EQ(UnscaleElement(-0.0f, 0.5f, &flag), 0.0f);
  EXPECT_TRUE(std::signbit(UnscaleElement(-0.0f, 0.5f, &flag)));
  EXPECT_EQ(flag, 0);
  EXPECT_TRUE(std::isinf(UnscaleElement(3e38f, 4.0f, &flag)));
  EXPECT_EQ(flag, 1);
  UnscaleElement(1.0f, 1.0f, &flag);
  EXPECT_EQ(flag, 1);  // never cleared
  int f2 = 0;
  EXPECT_EQ(UnscaleElement(FromBits(1), 1.0f, &f2), FromBits(1));  // subnormal
  EXPECT_EQ(f2, 0);
}

// ---- Squared norm terms ----

TEST(NormMath, SquaredTermsAccumulateInDoubleWithoutOverflow) {
  EXPECT_EQ(SquaredTerm(65504.0f), 65504.0 * 65504.0);
  double big = SquaredTerm(std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isfinite(big));
  double sum = 0;
  for (int i = 0; i < 1000; ++i) sum += big;
  EXPECT_TRUE(std::isfinite(sum));
  EXPECT_TRUE(std::isinf(SquaredTerm(-INFINITY)));
  EXPECT_TRUE(std::isnan(SquaredTerm(NAN)));
  EXPECT_EQ(SquaredTerm(FromBits(1)), std::ldexp(1.0, -298));  // not flushed
  EXPECT_FALSE(std::signbit(SquaredTerm(-0.0f)));
}

}  // namespace
}  // namespace math
}  // namespace zero
