// Block-wise quantization (kernels/quant_math.h, kernels/cpu/quant_simd.cc):
// the SIMD kernels give, on every instruction set, the bits of the scalar
// ZERO_HD bodies (which the CUDA kernels compile too); each value's error is
// within its block's bound, checked in double against the input; non-finite
// blocks stay non-finite; the packed sizes meet the traffic cuts the
// quantized collectives promise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hwy/targets.h"
#include "kernels/cpu/quant_simd.h"
#include "kernels/quant_math.h"

namespace zero {
namespace {

template <typename Fn>
void ForEachTarget(Fn fn) {
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(t);
    SCOPED_TRACE(hwy::TargetName(t));
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The scalar oracle: math::QuantizeBlockScalar per block, packed as the
// header describes (scales, then codes; int4 low nibble first; zero pad).
std::vector<uint8_t> PackScalar(const std::vector<float>& x, int bits, int block) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t nb = math::QuantBlocks(n, block);
  std::vector<uint8_t> out(math::QuantPackedBytes(n, bits, block), 0);
  std::vector<float> codes(block);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t first = b * block;
    const int64_t m = std::min<int64_t>(block, n - first);
    const float scale = math::QuantizeBlockScalar(x.data() + first, m, math::QuantMax(bits),
                                                  codes.data());
    std::memcpy(out.data() + b * 4, &scale, 4);
    for (int64_t k = 0; k < m; ++k) {
      const int64_t e = first + k;
      const int q = static_cast<int>(codes[k]);
      if (bits == 8) {
        out[nb * 4 + e] = static_cast<uint8_t>(static_cast<int8_t>(q));
      } else {
        out[nb * 4 + e / 2] |= static_cast<uint8_t>(math::Int4Nibble(q) << ((e & 1) * 4));
      }
    }
  }
  return out;
}

std::vector<float> UnpackScalar(const std::vector<uint8_t>& in, int64_t n, int bits, int block) {
  const int64_t nb = math::QuantBlocks(n, block);
  std::vector<float> out(n);
  for (int64_t e = 0; e < n; ++e) {
    float scale;
    std::memcpy(&scale, in.data() + (e / block) * 4, 4);
    const int q = bits == 8 ? static_cast<int8_t>(in[nb * 4 + e])
                            : math::Int4FromNibble(in[nb * 4 + e / 2] >> ((e & 1) * 4));
    out[e] = math::Dequant(static_cast<float>(q), scale);
  }
  return out;
}

std::vector<float> RandomValues(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> mag(-30, 30);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = g(rng) * std::ldexp(1.0f, mag(rng) / 3);
  // Ties for rint (x / scale exactly k + 0.5 happens for exact multiples),
  // zeros, negative zero, subnormals, a zero block.
  if (n > 10) {
    x[1] = 0.0f;
    x[2] = -0.0f;
    x[3] = 1e-40f;
    x[5] = -x[4];
  }
  for (int64_t i = 256; i < std::min<int64_t>(n, 256 + 130); ++i) x[i] = 0.0f;
  return x;
}

// memcmp over n bytes; an empty vector's data() may be nullptr, and
// memcmp(nullptr, nullptr, 0) is undefined behaviour (UBSan reports it).
template <typename T>
bool SameBytes(const std::vector<T>& a, const std::vector<T>& b, size_t n) {
  return n == 0 || std::memcmp(a.data(), b.data(), n * sizeof(T)) == 0;
}

TEST(QuantTest, SimdEqualsScalarBitwise) {
  for (int bits : {8, 4}) {
    for (int block : {1, 7, 64, 128, 255, 2048}) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{129}, int64_t{1000},
                        int64_t{4099}}) {
        SCOPED_TRACE(::testing::Message() << "bits " << bits << " block " << block << " n " << n);
        const std::vector<float> x = RandomValues(n, static_cast<uint32_t>(n * 31 + block));
        const std::vector<uint8_t> want = PackScalar(x, bits, block);
        const std::vector<float> deq = UnpackScalar(want, n, bits, block);
        ForEachTarget([&] {
          std::vector<uint8_t> got(want.size(), 0xAB);
          cpu::QuantizePiece(x.data(), n, bits, block, got.data());
          ASSERT_TRUE(SameBytes(want, got, want.size()));
          std::vector<float> out(n, -1.0f);
          cpu::DequantizePiece(got.data(), n, bits, block, out.data());
          ASSERT_TRUE(SameBytes(deq, out, n));
          std::vector<float> acc(x), acc_want(n);
          for (int64_t i = 0; i < n; ++i) acc_want[i] = x[i] + deq[i];
          cpu::DequantizeAdd(got.data(), n, bits, block, acc.data());
          ASSERT_TRUE(SameBytes(acc_want, acc, n));
        });
      }
    }
  }
}

// |x - x'| <= scale / 2 per value, scale = absmax / qmax of its block,
// computed here in double from the input (independent of the kernels), with
// one fp32 rounding of x / scale allowed for.
TEST(QuantTest, ErrorWithinBlockBound) {
  for (int bits : {8, 4}) {
    for (int block : {32, 128, 512}) {
      const int64_t n = 10000;
      const std::vector<float> x = RandomValues(n, 7u + block);
      std::vector<uint8_t> packed(math::QuantPackedBytes(n, bits, block));
      cpu::QuantizePiece(x.data(), n, bits, block, packed.data());
      std::vector<float> y(n);
      cpu::DequantizePiece(packed.data(), n, bits, block, y.data());
      const double qmax = bits == 8 ? 127.0 : 7.0;
      for (int64_t b = 0; b * block < n; ++b) {
        double absmax = 0.0;
        const int64_t end = std::min<int64_t>(n, (b + 1) * block);
        for (int64_t i = b * block; i < end; ++i) absmax = std::max(absmax, std::fabs(double(x[i])));
        const double bound = absmax / qmax * 0.5 * (1.0 + 1e-6) + 1e-45;
        for (int64_t i = b * block; i < end; ++i) {
          ASSERT_LE(std::fabs(double(x[i]) - double(y[i])), bound)
              << "bits " << bits << " block " << block << " element " << i;
        }
        // The largest value of a block is represented exactly up to rounding.
        if (absmax == 0.0) {
          for (int64_t i = b * block; i < end; ++i) ASSERT_EQ(y[i], 0.0f);
        }
      }
    }
  }
}

TEST(QuantTest, NonFiniteBlockStaysNonFinite) {
  for (int bits : {8, 4}) {
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<float> x(300, 0.5f);
      x[130] = bad;  // second block of 128
      std::vector<uint8_t> packed(math::QuantPackedBytes(300, bits, 128));
      ForEachTarget([&] {
        cpu::QuantizePiece(x.data(), 300, bits, 128, packed.data());
        std::vector<float> y(300);
        cpu::DequantizePiece(packed.data(), 300, bits, 128, y.data());
        for (int i = 0; i < 300; ++i) {
          if (i >= 128 && i < 256) {
            ASSERT_TRUE(std::isnan(y[i])) << i;
          } else {
            ASSERT_EQ(y[i], 0.5f) << i;
          }
        }
      });
    }
  }
}

// The traffic the quantized collectives promise (docs/ARCHITECTURE.md,
// "Quantized collectives"): at the default block of 128 values, int4 is
// >= 3.5x smaller than fp16 and int8 >= 3.5x smaller than fp32 (what zero's
// gradient reduction sends), int8 ~2x smaller than fp16.
TEST(QuantTest, PackedSizes) {
  const int64_t n = 1 << 20;
  EXPECT_EQ(math::QuantPackedBytes(n, 8, 128), n + n / 128 * 4);
  EXPECT_EQ(math::QuantPackedBytes(n, 4, 128), n / 2 + n / 128 * 4);
  EXPECT_EQ(math::QuantPackedBytes(5, 4, 128), 8);  // 4 scale + 3 codes + 1 pad
  EXPECT_GE(2.0 * n / math::QuantPackedBytes(n, 4, 128), 3.5);
  EXPECT_GE(4.0 * n / math::QuantPackedBytes(n, 8, 128), 3.5);
  EXPECT_GE(2.0 * n / math::QuantPackedBytes(n, 8, 128), 1.9);
}

}  // namespace
}  // namespace zero
