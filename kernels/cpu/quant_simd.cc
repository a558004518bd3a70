// Compiled once per SIMD target by hwy/foreach_target.h; the HWY_ONCE part
// at the end dispatches to the best target the CPU supports. Every vector
// line mirrors a line of kernels/quant_math.h (no FMA: -ffp-contract=off).
#include "kernels/cpu/quant_simd.h"

#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/quant_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace zero {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One block: its scale (math::QuantScale over math::QuantFinite) and its
// codes (math::QuantCode) as int8 in `codes`.
float QuantizeBlock(const float* x, size_t m, float qmax, int8_t* codes) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<int8_t, decltype(di)> d8;
  const size_t N = hn::Lanes(d);
  const auto big = hn::Set(d, 3.402823466e38f);
  auto vmax = hn::Zero(d);
  bool finite = true;
  size_t i = 0;
  for (; i + N <= m; i += N) {
    const auto a = hn::Abs(hn::LoadU(d, x + i));
    if (!hn::AllTrue(d, hn::Le(a, big))) finite = false;
    vmax = hn::Max(vmax, a);
  }
  float absmax = hn::GetLane(hn::MaxOfLanes(d, vmax));
  for (; i < m; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    finite = finite && math::QuantFinite(a);
    absmax = a > absmax ? a : absmax;
  }
  const float scale = math::QuantScale(absmax, finite, qmax);
  if (!(scale > 0.0f)) {
    std::memset(codes, 0, m);
    return scale;
  }
  const auto vs = hn::Set(d, scale);
  const auto hi = hn::Set(d, qmax);
  const auto lo = hn::Set(d, -qmax);
  i = 0;
  for (; i + N <= m; i += N) {
    auto q = hn::Round(hn::Div(hn::LoadU(d, x + i), vs));
    q = hn::Min(q, hi);
    q = hn::Max(q, lo);
    hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, q)), d8, codes + i);
  }
  for (; i < m; ++i) codes[i] = static_cast<int8_t>(math::QuantCode(x[i], scale, qmax));
  return scale;
}

void QuantizePieceImpl(const float* x, int64_t n, int bits, int block, uint8_t* out) {
  const float qmax = math::QuantMax(bits);
  const int64_t nb = math::QuantBlocks(n, block);
  const int64_t bytes = math::QuantPackedBytes(n, bits, block);
  // An empty piece has no bytes and may come with out == nullptr (an empty
  // vector's data()); memset(nullptr, 0, 0) is undefined behaviour.
  if (n == 0) return;
  uint8_t* codes = out + nb * 4;
  std::memset(codes, 0, bytes - nb * 4);
  int8_t tmp[kMaxQuantBlock];
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t first = b * block;
    const size_t m = static_cast<size_t>(n - first < block ? n - first : block);
    int8_t* dst = bits == 8 ? reinterpret_cast<int8_t*>(codes) + first : tmp;
    const float scale = QuantizeBlock(x + first, m, qmax, dst);
    std::memcpy(out + b * 4, &scale, 4);
    if (bits == 4) {
      for (size_t k = 0; k < m; ++k) {
        const int64_t e = first + static_cast<int64_t>(k);
        codes[e / 2] |= static_cast<uint8_t>(math::Int4Nibble(tmp[k]) << ((e & 1) * 4));
      }
    }
  }
}

// kAdd: acc[i] = acc[i] + code * scale; else out[i] = code * scale.
template <bool kAdd>
void DequantImpl(const uint8_t* in, int64_t n, int bits, int block, float* out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<int8_t, decltype(di)> d8;
  const size_t N = hn::Lanes(d);
  const int64_t nb = math::QuantBlocks(n, block);
  const uint8_t* codes = in + nb * 4;
  int8_t tmp[kMaxQuantBlock];
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t first = b * block;
    const size_t m = static_cast<size_t>(n - first < block ? n - first : block);
    float scale;
    std::memcpy(&scale, in + b * 4, 4);
    const int8_t* q8 = reinterpret_cast<const int8_t*>(codes) + first;
    if (bits == 4) {
      for (size_t k = 0; k < m; ++k) {
        const int64_t e = first + static_cast<int64_t>(k);
        tmp[k] = static_cast<int8_t>(math::Int4FromNibble(
            static_cast<uint8_t>(codes[e / 2] >> ((e & 1) * 4))));
      }
      q8 = tmp;
    }
    float* o = out + first;
    const auto vs = hn::Set(d, scale);
    size_t i = 0;
    for (; i + N <= m; i += N) {
      const auto v = hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q8 + i))), vs);
      hn::StoreU(kAdd ? hn::Add(hn::LoadU(d, o + i), v) : v, d, o + i);
    }
    for (; i < m; ++i) {
      const float v = math::Dequant(static_cast<float>(q8[i]), scale);
      o[i] = kAdd ? o[i] + v : v;
    }
  }
}

void DequantizePieceImpl(const uint8_t* in, int64_t n, int bits, int block, float* out) {
  DequantImpl<false>(in, n, bits, block, out);
}
void DequantizeAddImpl(const uint8_t* in, int64_t n, int bits, int block, float* acc) {
  DequantImpl<true>(in, n, bits, block, acc);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace zero
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zero {
namespace cpu {

HWY_EXPORT(QuantizePieceImpl);
HWY_EXPORT(DequantizePieceImpl);
HWY_EXPORT(DequantizeAddImpl);

void QuantizePiece(const float* x, int64_t n, int bits, int block, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(QuantizePieceImpl)(x, n, bits, block, out);
}
void DequantizePiece(const uint8_t* in, int64_t n, int bits, int block, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizePieceImpl)(in, n, bits, block, out);
}
void DequantizeAdd(const uint8_t* in, int64_t n, int bits, int block, float* acc) {
  HWY_DYNAMIC_DISPATCH(DequantizeAddImpl)(in, n, bits, block, acc);
}

}  // namespace cpu
}  // namespace zero
#endif  // HWY_ONCE
