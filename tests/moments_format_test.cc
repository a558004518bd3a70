// Adam's moments stored as bf16 or 8-bit blocks (optimizer.moments_format,
// docs/ARCHITECTURE.md "Optimizer state formats"): the shared kernel math
// against a double-precision step with the same rounding; the engine at
// stages 0-3, fp32 and bf16, worlds 1 and 3 against the double reference of
// tests/testing/mlp_harness.h rounding the moments as the format stores them
// (tests/testing/moments_rounding.h) after 1, 3 and 10 steps (bf16 working
// copies: against the single-rank stage 0 engine, as zero_stages_test); CPU and NVMe
// offload giving the in-memory bits; a checkpoint resharded from 3 ranks to
// 1 and loaded into another format; the state's bytes per param measured
// against the formula and the estimator; the config keys and their errors.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/config/config.h"
#include "core/estimate/memory_estimate.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/moments_format_step.h"
#include "kernels/cpu/q8_codec_simd.h"
#include "kernels/moments_format_math.h"
#include "tests/testing/fresh_dir.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/moments_rounding.h"
#include "tests/testing/optimizer_sweep.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

MomentsFormat FormatNamed(const std::string& f) {
  return f == "bf16" ? MomentsFormat::kBf16 : f == "8bit" ? MomentsFormat::kQ8 : MomentsFormat::kF32;
}

Config FormatConfig(const std::string& format, int stage, DType dtype) {
  Config c = SmallMlpConfig(stage, dtype);
  c.sub_group_size = 128;  // several NVMe chunks and offload pieces per group
  c.moments_format = FormatNamed(format);
  return c;
}

// As tests/testing/optimizer_sweep.h: the engine's float arithmetic
// against double; bf16 working copies: ten bf16 epsilons. A moment whose
// fp32 value lies within an ulp of a rounding boundary may round the other
// way than in double: one bf16 step, or one code of the 8-bit map, in that
// element.
double Tolerance(const std::string& format, DType t) {
  if (t != DType::kF32) return 4e-2;
  return format == "8bit" ? 2e-4 : 2e-5;
}

// The code nearest to ratio a among `map` (MinifloatMap: index = magnitude
// code) by brute force over every code in double; ties to the even code.
int BruteForceNearest(const std::vector<double>& map, double a) {
  int best = 0;
  for (int k = 1; k < static_cast<int>(map.size()); ++k) {
    const double dk = std::fabs(map[k] - a), db = std::fabs(map[best] - a);
    if (dk < db || (dk == db && k % 2 == 0)) best = k;
  }
  return best;
}

// Ratios where the rounding changes: every map value, every midpoint of
// neighbouring values (exact ties) and a few ulps either side, then random
// float bits in [0, 1].
std::vector<float> BoundaryRatios(const std::vector<double>& map, int random) {
  std::vector<float> r;
  auto around = [&](double x) {
    for (int d = -2; d <= 2; ++d) {
      const uint32_t u = math::FloatBits(static_cast<float>(x)) + d;
      if (u <= 0x3f800000u) r.push_back(math::BitsFloat(u));
    }
  };
  for (size_t k = 0; k < map.size(); ++k) {
    around(map[k]);
    if (k + 1 < map.size()) around(0.5 * (map[k] + map[k + 1]));
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits(0, 0x3f800000u);
  for (int i = 0; i < random; ++i) r.push_back(math::BitsFloat(bits(rng)));
  return r;
}

// The shared math's codes are the reference's minifloat maps
// (tests/testing/moments_rounding.h): each code decodes to its map value
// times the absmax (1 exactly at the top code), and encoding a ratio is the
// nearest code found by brute force, ties to even; past 1 the top code, NaN 0.
TEST(MomentsFormatMath, MinifloatCodesAreTheNearestMapValues) {
  const std::vector<double> smap = MinifloatMap(true), umap = MinifloatMap(false);
  ASSERT_EQ(smap.size(), 121u);
  ASSERT_EQ(umap.size(), 249u);
  EXPECT_EQ(smap[8], std::ldexp(1.0, -14));
  EXPECT_EQ(umap[8], std::ldexp(1.0, -21));
  EXPECT_EQ(umap[152], 0.125);
  EXPECT_EQ(umap[153], 0.125 * (1 + 1.0 / 32));
  for (float absmax : {1.0f, 3.0e-7f, 7.5f, 2.5e20f}) {
    for (int k = 0; k < 121; ++k) {
      const float want = static_cast<float>(smap[k] * absmax);
      EXPECT_EQ(math::Q8DecodeSigned(static_cast<uint8_t>(k), absmax), want) << k;
      EXPECT_EQ(math::Q8DecodeSigned(static_cast<uint8_t>(128 + k), absmax), -want) << k;
      for (float sign : {1.0f, -1.0f}) {
        const float x = math::Q8DecodeSigned(static_cast<uint8_t>(sign < 0 ? 128 + k : k), absmax);
        EXPECT_EQ(math::Q8EncodeSigned(x, math::Q8Inverse(absmax)), sign < 0 ? 128 + k : k) << k;
      }
    }
    for (int k = 0; k < 249; ++k) {
      const float x = math::Q8DecodeUnsigned(static_cast<uint8_t>(k), absmax);
      EXPECT_EQ(x, static_cast<float>(umap[k] * absmax)) << k;
      EXPECT_EQ(math::Q8EncodeUnsigned(x, math::Q8Inverse(absmax)), k) << k;
    }
  }
  EXPECT_EQ(math::Q8DecodeSigned(120, 2.5f), 2.5f);
  EXPECT_EQ(math::Q8DecodeUnsigned(248, 2.5f), 2.5f);
  int wrong = 0;
  for (bool is_signed : {true, false}) {
    const std::vector<double>& map = is_signed ? smap : umap;
    for (float a : BoundaryRatios(map, 200000)) {
      const int want = BruteForceNearest(map, a);
      const int got = is_signed ? math::Q8EncodeSigned(a, 1.0f) : math::Q8EncodeUnsigned(a, 1.0f);
      if (got != want && ++wrong < 10) {
        ADD_FAILURE() << (is_signed ? "m" : "v") << " ratio " << a << ": " << got << " want "
                      << want;
      }
      if (is_signed) {
        EXPECT_EQ(math::Q8EncodeSigned(-a, 1.0f), 128 + want) << a;
      }
    }
  }
  EXPECT_EQ(wrong, 0);
  for (float past : {1.0000001f, 1.5f, INFINITY}) {
    EXPECT_EQ(math::Q8EncodeSigned(past, 1.0f), 120);
    EXPECT_EQ(math::Q8EncodeSigned(-past, 1.0f), 248);
    EXPECT_EQ(math::Q8EncodeUnsigned(past, 1.0f), 248);
  }
  EXPECT_EQ(math::Q8EncodeSigned(NAN, 1.0f), 0);
  EXPECT_EQ(math::Q8EncodeUnsigned(NAN, 1.0f), 0);
  EXPECT_EQ(math::Q8Inverse(0.0f), 0.0f);
  EXPECT_EQ(math::Q8EncodeUnsigned(0.0f, math::Q8Inverse(0.0f)), 0);
}

// decode(encode(x)) within half a step: 1/16 of |x| (3 mantissa bits;
// exp_avg_sq's top 3 binades 1/64) plus the ratio's float rounding in the
// binades, half of the linear step times the absmax below them (exp_avg
// 2^-18, exp_avg_sq 2^-25).
TEST(MomentsFormatMath, RoundTripErrorIsHalfAStep) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> decade(-12.0f, 0.0f);
  std::uniform_real_distribution<float> scale(-30.0f, 30.0f);
  for (int i = 0; i < 200000; ++i) {
    const float absmax = std::pow(10.0f, scale(rng));
    const float x = std::min(absmax, absmax * std::pow(10.0f, decade(rng)));
    const float inv = math::Q8Inverse(absmax);
    const double dm = math::Q8DecodeSigned(math::Q8EncodeSigned(-x, inv), absmax);
    const double dv = math::Q8DecodeUnsigned(math::Q8EncodeUnsigned(x, inv), absmax);
    const double tol_m =
        std::max(x / 16.0, std::ldexp(static_cast<double>(absmax), -18)) * (1 + 1e-6);
    const double tol_v = (x >= absmax / 8.0f ? x / 64.0
                          : std::max(x / 16.0, std::ldexp(static_cast<double>(absmax), -25))) *
                         (1 + 1e-6);
    ASSERT_LE(std::fabs(dm + x), tol_m) << x << " of " << absmax;
    ASSERT_LE(std::fabs(dv - x), tol_v) << x << " of " << absmax;
  }
}

// The SIMD codec (kernels/cpu/q8_codec_simd.h) is the shared scalar math
// bit for bit: blocks of boundary and random ratios times absmaxes over 60
// decades, m with alternating signs, a block with NaN and infinity, an
// all-zero block and a partial last block (scalar tail).
TEST(MomentsFormatMath, SimdCodecIsTheScalarCodeBitForBit) {
  std::vector<float> ratios = BoundaryRatios(MinifloatMap(false), 50000);
  for (float r : BoundaryRatios(MinifloatMap(true), 0)) ratios.push_back(r);
  const int64_t per = math::kQ8Block - 1;
  const int64_t blocks = (static_cast<int64_t>(ratios.size()) + per - 1) / per + 2;
  const int64_t n = blocks * math::kQ8Block - 17;
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> scale(-30.0f, 30.0f);
  std::vector<float> absmax(blocks);
  for (int64_t b = 0; b + 1 < blocks; ++b) {
    absmax[b] = std::pow(10.0f, scale(rng));
    m[b * math::kQ8Block] = -absmax[b];
    v[b * math::kQ8Block] = absmax[b];
  }
  for (int64_t r = 0; r < static_cast<int64_t>(ratios.size()); ++r) {
    const int64_t i = r / per * math::kQ8Block + 1 + r % per;
    const float a = absmax[i / math::kQ8Block];
    m[i] = r % 2 ? -ratios[r] * a : ratios[r] * a;
    v[i] = ratios[r] * a;
  }
  const int64_t special = (blocks - 2) * math::kQ8Block;  // NaN and inf
  m[special + 3] = NAN;
  v[special + 4] = NAN;
  m[special + 5] = -INFINITY;  // the last block stays all zero
  std::vector<math::Q8Block> packed(blocks);
  cpu::PackMoments(math::kMomentsQ8, m.data(), v.data(), packed.data(), n);
  std::vector<float> dm(n), dv(n);
  cpu::UnpackMoments(math::kMomentsQ8, packed.data(), dm.data(), dv.data(), n);
  int64_t wrong = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    float m_max = 0.0f, v_max = 0.0f;
    const int64_t end = std::min(n, (b + 1) * math::kQ8Block);
    for (int64_t i = b * math::kQ8Block; i < end; ++i) {
      m_max = std::fmax(m_max, std::fabs(m[i]));
      v_max = std::fmax(v_max, v[i]);
    }
    EXPECT_EQ(math::FloatBits(packed[b].m_absmax), math::FloatBits(m_max)) << b;
    EXPECT_EQ(math::FloatBits(packed[b].v_absmax), math::FloatBits(v_max)) << b;
    for (int64_t i = b * math::kQ8Block; i < end; ++i) {
      const int64_t k = i % math::kQ8Block;
      const uint8_t cm = math::Q8EncodeSigned(m[i], math::Q8Inverse(m_max));
      const uint8_t cv = math::Q8EncodeUnsigned(v[i], math::Q8Inverse(v_max));
      if ((packed[b].m[k] != cm || packed[b].v[k] != cv) && ++wrong < 10) {
        ADD_FAILURE() << "element " << i << ": " << int(packed[b].m[k]) << "/" << int(cm) << " "
                      << int(packed[b].v[k]) << "/" << int(cv);
      }
      EXPECT_EQ(math::FloatBits(dm[i]), math::FloatBits(math::Q8DecodeSigned(cm, m_max))) << i;
      EXPECT_EQ(math::FloatBits(dv[i]), math::FloatBits(math::Q8DecodeUnsigned(cv, v_max))) << i;
    }
  }
  EXPECT_EQ(wrong, 0);
}

// One step of the shared kernel (cpu::OptimizerStep) over 1000 elements (a
// partial last block) from the same packed state as the double reference:
// the params agree to fp32 rounding, and each stored moment is the
// reference's rounding (to float rounding) or, when its unrounded value lies
// within float rounding of a boundary, the neighbouring step.
TEST(MomentsFormatMath, KernelStepMatchesDoubleReference) {
  const int64_t n = 1000;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (MomentsFormat f : {MomentsFormat::kBf16, MomentsFormat::kQ8}) {
    const int format = static_cast<int>(f);
    std::vector<float> p(n), g(n), m0(n), v0(n);
    for (int64_t i = 0; i < n; ++i) {
      p[i] = normal(rng);
      g[i] = normal(rng) * (i % 97 == 0 ? 30.0f : 1.0f);
      m0[i] = 0.1f * normal(rng);
      v0[i] = 0.01f * std::fabs(normal(rng)) * (i % 13 == 0 ? 1e-4f : 1.0f);
    }
    std::vector<char> packed(math::PackedMomentsBytes(format, n));
    cpu::PackMoments(format, m0.data(), v0.data(), packed.data(), n);
    std::vector<float> m(n), v(n);
    cpu::UnpackMoments(format, packed.data(), m.data(), v.data(), n);  // the stored start

    math::OptimScalars s{};
    s.kind = math::kOptimAdam;
    s.moments_format = format;
    s.adam = math::MakeAdamScalars(1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 3, 0.5f);
    std::vector<float> got_p = p;
    cpu::OptimizerStep(s, g.data(), DType::kF32, got_p.data(),
                       reinterpret_cast<float*>(packed.data()), nullptr, n, nullptr,
                       DType::kF32, false);
    std::vector<float> got_m(n), got_v(n);
    cpu::UnpackMoments(format, packed.data(), got_m.data(), got_v.data(), n);

    // The reference: double arithmetic from the decoded state, with the
    // hyper-parameters as the fp32 values the kernel holds (1 - 0.999f is
    // 4.7e-5 away from 0.001 relatively: more than the rounding checked).
    const double b1 = 0.9f, b2 = 0.999f, wd = 0.01f, lr = 1e-2f, eps = 1e-8f;
    std::vector<std::vector<double>> rm(1), rv(1);
    double max_p = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double gk = 0.5 * g[i];
      const double mm = b1 * m[i] + (1 - b1) * gk;
      const double vv = b2 * v[i] + (1 - b2) * gk * gk;
      const double upd = (mm / (1 - std::pow(b1, 3))) /
                             (std::sqrt(vv) / std::sqrt(1 - std::pow(b2, 3)) + eps) +
                         wd * p[i];
      const double rp = p[i] - lr * upd;
      max_p = std::max(max_p, std::fabs(got_p[i] - rp) / (std::fabs(rp) + 1e-3));
      rm[0].push_back(mm);
      rv[0].push_back(vv);
    }
    EXPECT_LT(max_p, 1e-5) << MomentsFormatName(f);
    Config c;
    c.moments_format = f;
    c.sub_group_size = n;
    c.dtype = DType::kF32;
    std::vector<std::vector<double>> unrounded_m = rm, unrounded_v = rv;
    RoundMoments(c, {true}, &rm, &rv);
    int off = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int which = 0; which < 2; ++which) {
        const double want = which ? rv[0][i] : rm[0][i];
        const double got = which ? got_v[i] : got_m[i];
        // The block's absmax is the fp32 maximum of fp32 moments: equal to
        // float rounding.
        if (std::fabs(got - want) <= 1e-6 * std::fabs(want)) continue;
        ++off;
        // Off by one step: then the unrounded value sits near the midpoint.
        const double raw = which ? unrounded_v[0][i] : unrounded_m[0][i];
        EXPECT_LE(std::fabs(std::fabs(raw - got) - std::fabs(raw - want)),
                  1e-5 * std::fabs(raw) + 1e-30)
            << MomentsFormatName(f) << " element " << i << (which ? " v" : " m");
      }
    }
    EXPECT_LE(off, 4) << MomentsFormatName(f);
  }
}

// The CPU step's SIMD tiles and codec are bitwise the shared
// per-element and per-block math the CUDA kernel runs
// (math::AdamUpdateBf16, math::AdamUpdateQ8Block), over magnitudes spanning
// the maps' decades.
TEST(MomentsFormatMath, CpuStepIsTheSharedMathBitForBit) {
  const int64_t n = 3 * 4096 + 1000;  // several tiles and a partial block
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-9.0f, 1.0f);
  const math::AdamScalars s = math::MakeAdamScalars(1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 5, 1.0f);
  for (int format : {math::kMomentsBf16, math::kMomentsQ8}) {
    std::vector<float> p(n), g(n), m(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
      p[i] = normal(rng);
      g[i] = normal(rng) * std::pow(10.0f, decade(rng));
      m[i] = normal(rng) * std::pow(10.0f, decade(rng));
      v[i] = std::fabs(normal(rng)) * std::pow(10.0f, decade(rng));
    }
    std::vector<char> packed(math::PackedMomentsBytes(format, n));
    cpu::PackMoments(format, m.data(), v.data(), packed.data(), n);
    std::vector<char> want = packed;
    std::vector<float> want_p = p;
    if (format == math::kMomentsBf16) {
      auto* mv = reinterpret_cast<uint32_t*>(want.data());
      for (int64_t i = 0; i < n; ++i) math::AdamUpdateBf16(s, g[i], &want_p[i], mv + i);
    } else {
      auto* blocks = reinterpret_cast<math::Q8Block*>(want.data());
      for (int64_t a = 0; a < n; a += math::kQ8Block) {
        math::AdamUpdateQ8Block(s, g.data() + a, want_p.data() + a, blocks + a / 64,
                                static_cast<int>(std::min<int64_t>(64, n - a)));
      }
    }
    math::OptimScalars os{};
    os.kind = math::kOptimAdam;
    os.moments_format = format;
    os.adam = s;
    cpu::OptimizerStep(os, g.data(), DType::kF32, p.data(),
                       reinterpret_cast<float*>(packed.data()), nullptr, n, nullptr,
                       DType::kF32, false);
    EXPECT_EQ(0, std::memcmp(p.data(), want_p.data(), n * 4)) << format;
    EXPECT_EQ(0, std::memcmp(packed.data(), want.data(), packed.size())) << format;
  }
}

class MomentsFormatTest
    : public ::testing::TestWithParam<std::tuple<std::string, SweepCase>> {};

// Not ExpectMatchesReferenceStepByStep: bf16 working copies take another
// reference, and fp32 checks that the format's rounding shows.
TEST_P(MomentsFormatTest, MatchesDoublePrecisionReferenceStepByStep) {
  const std::string format = std::get<0>(GetParam());
  const int stage = std::get<1>(GetParam()).stage;
  const int world = std::get<1>(GetParam()).world;
  const DType dtype = std::get<1>(GetParam()).dtype;
  const Config c = FormatConfig(format, stage, dtype);
  for (int steps : {1, 3, 10}) {
    MlpSpec spec;
    spec.steps = steps;
    const MlpResult got = TrainAt(c, world, spec);
    // bf16 working copies: Adam's first steps are near sign(g), and the
    // rounded gradients' signs differ from double's; as zero_stages_test,
    // the single-rank stage 0 engine is the reference there.
    const MlpResult ref = dtype == DType::kF32
                              ? TrainMlpReference(c, spec)
                              : TrainAt(FormatConfig(format, 0, dtype), 1, spec);
    EXPECT_LE(MaxRelDiff(got, ref), Tolerance(format, dtype)) << format << " after " << steps;
    if (dtype == DType::kF32 && steps == 10) {
      // The format's rounding shows: fp32 moments end elsewhere.
      const MlpResult fp32 = TrainMlpReference(FormatConfig("fp32", stage, dtype), spec);
      EXPECT_GT(MaxRelDiff(fp32, ref), 3 * Tolerance(format, dtype)) << format;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    FormatsStagesWorldsDtypes, MomentsFormatTest,
    ::testing::Combine(::testing::Values("bf16", "8bit"),
                       ::testing::ValuesIn(StagesWorldsDtypes())),
    [](const ::testing::TestParamInfo<MomentsFormatTest::ParamType>& i) {
      return std::string(std::get<0>(i.param) == "8bit" ? "q8" : std::get<0>(i.param)) + "_" +
             SweepCaseName(std::get<1>(i.param));
    });

// Offload moves the packed state, not the arithmetic: CPU offload beside an
// off-host device, and NVMe (bf16), train to the in-memory run's bits.
TEST(MomentsFormatOffload, CpuAndNvmeOffloadGiveTheInMemoryBits) {
  for (const std::string format : {"bf16", "8bit"}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (DType t : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(format + " stage " + std::to_string(stage) + " " + DTypeName(t));
        const Config c = FormatConfig(format, stage, t);
        const MlpResult memory = TrainAt(c, 3, MlpSpec());
        if (t == DType::kF32) {
          EXPECT_LE(MaxRelDiff(memory, TrainMlpReference(c, MlpSpec())), Tolerance(format, t));
        }
        if (format == "bf16") ExpectNvmeOffloadGivesTheBits(c, memory, "moments_format_nvme");
        ExpectCpuOffloadGivesTheOnDeviceBits(c, memory, Tolerance(format, t));
      }
    }
  }
}

// Checkpoints hold the moments' fp32 values (what the format decodes to).
// Saved at 3 ranks and resumed at 1 the blocks are the same group blocks,
// so training ends where training through ends; from NVMe too.
TEST(MomentsFormatCheckpoint, ReshardsThreeToOne) {
  for (const std::string format : {"bf16", "8bit"}) {
    for (bool nvme : {false, true}) {
      if (nvme && format == "8bit") continue;
      SCOPED_TRACE(format + (nvme ? " nvme" : ""));
      Config c = FormatConfig(format, 2, DType::kF32);
      if (nvme) {
        c.offload_optimizer.device = OffloadDevice::kNvme;
        c.offload_optimizer.nvme_path = FreshDir("moments_format_ckpt_nvme");
      }
      MlpSpec spec;
      spec.ckpt_dir = FreshDir("moments_format_ckpt");
      spec.save_after = 4;
      const MlpResult through = TrainAt(c, 3, spec);
      MlpSpec resume;
      resume.resume_dir = spec.ckpt_dir;
      resume.resume_tag = "mid";
      Config one = FormatConfig(format, 3, DType::kF32);
      const MlpResult resumed = TrainAt(one, 1, resume);
      EXPECT_LE(MaxRelDiff(resumed, through), 1e-6);
    }
  }
}

// A checkpoint of fp32 moments loads into a bf16 or 8-bit engine (the
// values are rounded on load) and the reverse: each continues as the
// double reference whose moments switch format at the load.
TEST(MomentsFormatCheckpoint, LoadsIntoAnotherFormat) {
  for (const std::string from : {"fp32", "bf16", "8bit"}) {
    for (const std::string to : {"fp32", "bf16", "8bit"}) {
      if (from == to) continue;
      SCOPED_TRACE(from + " -> " + to);
      MlpSpec save;
      save.ckpt_dir = FreshDir("moments_format_convert");
      save.steps = 4;
      save.final_tag = "end";
      (void)TrainAt(FormatConfig(from, 1, DType::kF32), 3, save);
      MlpSpec load;
      load.resume_dir = save.ckpt_dir;
      load.resume_tag = "end";
      load.steps = 8;
      const MlpResult got = TrainAt(FormatConfig(to, 1, DType::kF32), 1, load);
      // The reference: four steps with `from`'s moments, the load rounding
      // them to `to`'s format, four steps with `to`'s.
      MlpSpec ref;
      ref.steps = 8;
      ref.moments_format_switch = 4;
      ref.moments_format_after = FormatNamed(to);
      const MlpResult want = TrainMlpReference(FormatConfig(from, 1, DType::kF32), ref);
      EXPECT_LE(MaxRelDiff(got, want), Tolerance(from == "8bit" ? from : to, DType::kF32));
      std::printf("%s -> %s: %.3g of the switched reference\n", from.c_str(), to.c_str(),
                  MaxRelDiff(got, want));
    }
  }
}

// Bytes per owned element: master 4, moments 8 (fp32), 4 (bf16) or 2 +
// 8/64 (8-bit), measured (zero_stats) against the formula and the estimator.
TEST(MomentsFormatMemory, StateBytesPerParamMatchFormulaAndEstimate) {
  for (const std::string format : {"fp32", "bf16", "8bit"}) {
    for (bool cpu : {false, true}) {
      Config c = FormatConfig(format, 2, DType::kBF16);
      if (cpu) c.offload_optimizer.device = OffloadDevice::kCpu;
      MlpSpec spec;
      spec.steps = 1;
      std::vector<MlpResult> all = TrainAll(c, 3, spec);
      const EngineStats& s = all[0].stats;
      const int64_t owned = s.padded_numel / 3;
      ASSERT_EQ(owned % 64, 0);
      const double per = format == "fp32" ? 8.0 : format == "bf16" ? 4.0 : 2.0 + 8.0 / 64;
      EXPECT_EQ(s.master_bytes, owned * 4) << format;
      EXPECT_EQ(s.optimizer_bytes, static_cast<int64_t>(owned * per)) << format;
      std::vector<EstimateParam> params;
      for (const std::vector<float>& p : all[0].params) {
        EstimateParam ep;
        ep.numel = static_cast<int64_t>(p.size());
        params.push_back(ep);
      }
      params[0].trainable = false;  // the frozen embedding
      auto est = EstimateMemory(params, c, {3, 1, false});
      ASSERT_TRUE(est.ok()) << est.status();
      EXPECT_EQ(est->optimizer_bytes, s.optimizer_bytes) << format;
    }
  }
}

TEST(MomentsFormatConfig, KeysAndErrors) {
  auto parse = [](const std::string& body) {
    return ParseDsConfig(R"({"train_batch_size": 8, )" + body + "}");
  };
  auto q8 = parse(R"("optimizer": {"type": "AdamW", "moments_format": "8bit"})");
  ASSERT_TRUE(q8.ok()) << q8.status();
  EXPECT_EQ(q8->moments_format, MomentsFormat::kQ8);
  auto ds = parse(R"("bf16": {"enabled": true, "bf16_optimizer_states": true})");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->moments_format, MomentsFormat::kBf16);
  auto def = parse(R"("optimizer": {"type": "Adam"})");
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->moments_format, MomentsFormat::kF32);

  auto bad = parse(R"("optimizer": {"type": "AdamW", "moments_format": "int4"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("moments_format"), std::string::npos) << bad.status();
  auto both = parse(R"("bf16": {"enabled": true, "bf16_optimizer_states": true},
      "optimizer": {"type": "AdamW", "moments_format": "8bit"})");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("bf16_optimizer_states"), std::string::npos);

  auto resolve = [](Config c) { return c.Resolve(1); };
  Config lion = FormatConfig("bf16", 1, DType::kF32);
  lion.optimizer = OptimizerType::kLion;
  absl::Status s = resolve(lion);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Adam"), std::string::npos) << s;
  Config odd = FormatConfig("8bit", 1, DType::kF32);
  odd.sub_group_size = 100;
  s = resolve(odd);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sub_group_size"), std::string::npos) << s;
  Config nvme = FormatConfig("8bit", 1, DType::kF32);
  nvme.offload_optimizer.device = OffloadDevice::kNvme;
  nvme.offload_optimizer.nvme_path = "/tmp";
  s = resolve(nvme);
  EXPECT_TRUE(s.ok()) << s;  // 8-bit on NVMe: tests/moments_format_nvme_test.cc
}

}  // namespace
}  // namespace testing
}  // namespace zero
