// The 8-bit moments' SIMD codec and fused Adam step (kernels/cpu/
// q8_codec_simd.h) on the blocks its fast paths must leave to the exact
// one, bit for bit the scalar math (kernels/moments_format_math.h): every
// one of the 256 codes of both maps decoded against absmaxes including 0,
// -0, negative, subnormal, huge, infinity and NaN; the fused step (Adam,
// L2 and decoupled weight decay) and the encoder over blocks holding NaN,
// infinities, subnormal moments whose absmax has no finite reciprocal,
// zeros against such an absmax, and negative exp_avg_sq, next to ordinary
// blocks.
#include "kernels/cpu/q8_codec_simd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "hwy/targets.h"
#include "kernels/cast_math.h"
#include "kernels/moments_format_math.h"

namespace zero {
namespace {

constexpr int kB = math::kQ8Block;

// fn() once per SIMD target this CPU runs and the build compiled (AVX2,
// SSE4, SSSE3, the emulated one ...): dynamic dispatch otherwise only ever
// takes the best.
template <class Fn>
void OnEveryTarget(Fn fn) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
}

void DecodesEveryCode() {
  for (float absmax : {1.0f, 2.5f, 0.0f, -0.0f, -3.0f, 1e-40f, 3e38f, INFINITY, -INFINITY, NAN}) {
    std::vector<math::Q8Block> blocks(256 / kB);
    for (int c = 0; c < 256; ++c) {
      blocks[c / kB].m[c % kB] = static_cast<uint8_t>(c);
      blocks[c / kB].v[c % kB] = static_cast<uint8_t>(255 - c);
    }
    for (auto& b : blocks) b.m_absmax = b.v_absmax = absmax;
    std::vector<float> m(256), v(256);
    cpu::Q8DecodeTile(blocks.data(), 256, m.data(), v.data());
    for (int c = 0; c < 256; ++c) {
      EXPECT_EQ(math::FloatBits(m[c]),
                math::FloatBits(math::Q8DecodeSigned(static_cast<uint8_t>(c), absmax)))
          << "code " << c << " absmax " << absmax;
      EXPECT_EQ(math::FloatBits(v[c]),
                math::FloatBits(math::Q8DecodeUnsigned(static_cast<uint8_t>(255 - c), absmax)))
          << "code " << 255 - c << " absmax " << absmax;
    }
  }
}

// Blocks 0..5 each hold one kind of special case (the encoder's test adds
// a few to blocks 2, 5 and 6), block 6 is ordinary, and the last block is
// partial.
struct EdgeBlocks {
  static constexpr int kBlocks = 8;
  static constexpr int64_t kLen = kBlocks * kB - 21;
  std::vector<float> g, p, m, v;
  std::vector<math::Q8Block> packed;
  EdgeBlocks() : g(kLen), p(kLen), m(kLen), v(kLen), packed(kBlocks) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < kLen; ++i) {
      g[i] = normal(rng);
      p[i] = normal(rng);
      m[i] = 0.1f * normal(rng);
      v[i] = 0.01f * std::fabs(normal(rng));
    }
    g[0 * kB + 3] = NAN;  // NaN moments after the step
    m[0 * kB + 3] = NAN;
    v[1 * kB + 7] = NAN;
    g[2 * kB + 9] = INFINITY;       // infinite m and v: inf * (1 / inf) is NaN
    for (int k = 0; k < kB; ++k) {  // subnormal moments: 1/absmax overflows
      g[3 * kB + k] = k % 3 ? 1e-39f : 0.0f;
      m[3 * kB + k] = k % 3 ? -1e-40f : 0.0f;
      v[3 * kB + k] = 0.0f;
    }
    for (int k = 0; k < kB; ++k) v[4 * kB + k] = -v[4 * kB + k];  // negative exp_avg_sq
    // The packed start: encoded by the scalar math, block 4's v_absmax
    // negative so that its decoded v is, block 5's a NaN with the sign bit
    // set (a negative signed integer: only an unsigned maximum sees it).
    for (int b = 0; b < kBlocks; ++b) {
      const int n = static_cast<int>(std::min<int64_t>(kB, kLen - b * kB));
      float m_max = 0.0f, v_max = 0.0f;
      for (int k = 0; k < n; ++k) {
        m_max = std::fmax(m_max, std::fabs(m[b * kB + k]));
        v_max = std::fmax(v_max, std::fabs(v[b * kB + k]));
      }
      math::Q8Block& q = packed[b];
      std::memset(&q, 0, sizeof(q));
      q.m_absmax = m_max;
      q.v_absmax = b == 4 ? -v_max : b == 5 ? -NAN : v_max;
      for (int k = 0; k < n; ++k) {
        q.m[k] = math::Q8EncodeSigned(m[b * kB + k], math::Q8Inverse(m_max));
        q.v[k] = math::Q8EncodeUnsigned(std::fabs(v[b * kB + k]), math::Q8Inverse(v_max));
      }
    }
  }
};

void FusedStepOnEdgeBlocks() {
  for (float wd : {0.0f, 0.01f}) {
    for (bool decoupled : {false, true}) {
      math::AdamScalars s = math::MakeAdamScalars(1e-2f, 0.9f, 0.999f, 1e-8f, wd, 1, 4, 1.0f);
      s.decoupled = decoupled;
      EdgeBlocks got, want;
      cpu::AdamTileQ8Moments(s, got.g.data(), got.p.data(), got.packed.data(), EdgeBlocks::kLen);
      for (int b = 0; b < EdgeBlocks::kBlocks; ++b) {
        math::AdamUpdateQ8Block(s, want.g.data() + b * kB, want.p.data() + b * kB, &want.packed[b],
                                static_cast<int>(std::min<int64_t>(kB, EdgeBlocks::kLen - b * kB)));
      }
      EXPECT_EQ(0, std::memcmp(got.p.data(), want.p.data(), EdgeBlocks::kLen * 4)) << wd;
      for (int b = 0; b < EdgeBlocks::kBlocks; ++b) {
        EXPECT_EQ(0, std::memcmp(&got.packed[b], &want.packed[b], sizeof(math::Q8Block)))
            << "block " << b << " wd " << wd << " decoupled " << decoupled;
      }
    }
  }
}

void EncoderOnEdgeBlocks() {
  EdgeBlocks e;
  e.m[2 * kB + 9] = -INFINITY;
  e.v[5 * kB + 11] = -NAN;
  e.v[6 * kB + 12] = -0.0f;
  std::vector<math::Q8Block> got(EdgeBlocks::kBlocks);
  std::memset(got.data(), 0, got.size() * sizeof(math::Q8Block));
  cpu::Q8EncodeTile(e.m.data(), e.v.data(), EdgeBlocks::kLen, got.data());
  for (int b = 0; b < EdgeBlocks::kBlocks; ++b) {
    const int n = static_cast<int>(std::min<int64_t>(kB, EdgeBlocks::kLen - b * kB));
    float m_max = 0.0f, v_max = 0.0f;
    for (int k = 0; k < n; ++k) {
      m_max = std::fmax(m_max, std::fabs(e.m[b * kB + k]));
      v_max = std::fmax(v_max, e.v[b * kB + k]);
    }
    EXPECT_EQ(math::FloatBits(got[b].m_absmax), math::FloatBits(m_max)) << b;
    EXPECT_EQ(math::FloatBits(got[b].v_absmax), math::FloatBits(v_max)) << b;
    for (int k = 0; k < n; ++k) {
      EXPECT_EQ(got[b].m[k], math::Q8EncodeSigned(e.m[b * kB + k], math::Q8Inverse(m_max)))
          << "block " << b << " element " << k;
      EXPECT_EQ(got[b].v[k], math::Q8EncodeUnsigned(e.v[b * kB + k], math::Q8Inverse(v_max)))
          << "block " << b << " element " << k;
    }
  }
}

TEST(Q8CodecSimd, DecodesEveryCodeAsTheScalarAgainstAnyAbsmax) { OnEveryTarget(DecodesEveryCode); }
TEST(Q8CodecSimd, FusedStepIsTheScalarOnEdgeBlocks) { OnEveryTarget(FusedStepOnEdgeBlocks); }
TEST(Q8CodecSimd, EncoderIsTheScalarOnEdgeBlocks) { OnEveryTarget(EncoderOnEdgeBlocks); }

TEST(Q8CodecSimd, RunsOnMoreThanOneTarget) {
  EXPECT_GE(hwy::SupportedAndGeneratedTargets().size(), 2u);
}

}  // namespace
}  // namespace zero
