// Compiled once per SIMD target by hwy/foreach_target.h; the HWY_ONCE part
// at the end dispatches to the best target the CPU supports.
#include "kernels/cpu/q8_codec_simd.h"

#include <algorithm>
#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/q8_codec_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/adam_vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zero {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Decoding goes through binary16: a code k of a map's 3-bit-mantissa
// regions is the binary16 k << 7 (the linear steps are binary16's
// subnormals) times 2^(E + 14), and a code of its Bits-mantissa region a
// binary16 with Bits mantissa bits at the same scale. The conversion to fp32
// (F16C on AVX2) and the power-of-2 scale (no fp32 subnormals) are exact, so
// the value is math::Q8MagValue's bit for bit.
template <class Map>
constexpr bool kHalfCodes = 1 - Map::kLo - Map::kTop + 14 <= 0 &&
                            1 - Map::kLo - Map::kTop + 14 > -100 &&
                            (Map::kTop > 0 ? ((255 - 8 * Map::kLo) >> Map::kBits) + Map::kLo < 31
                                           : Map::kLo == 15 && Map::kBits == 3);
static_assert(kHalfCodes<math::Q8MMap> && kHalfCodes<math::Q8VMap>,
              "the maps' values are finite binary16s times 2^(E+14)");

// Binary16 bits h of each lane times 2^(E + 14) of Map, as fp32.
template <class Map, class D, class V16>
HWY_INLINE hn::Vec<D> ScaledHalf(D d, V16 h) {
  constexpr int kScale = 1 - Map::kLo - Map::kTop + 14;
  const auto x = hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), h));
  if constexpr (kScale == 0) return x;
  return hn::Mul(x, hn::Set(d, std::ldexp(1.0f, kScale)));
}

// Map's binary16 bits of each lane's magnitude code k (< 256).
template <class Map, class D16>
HWY_INLINE hn::Vec<D16> HalfBits(D16 d16, hn::Vec<D16> k) {
  constexpr int kE = 1 - Map::kLo - Map::kTop;
  auto h = hn::ShiftLeft<7>(k);
  if constexpr (Map::kTop > 0) {
    const auto top = hn::ShiftLeft<10 - Map::kBits>(
        hn::Add(k, hn::Set(d16, ((1 - Map::kTop - kE) << Map::kBits) - 8 * Map::kLo)));
    h = hn::IfThenElse(hn::Lt(k, hn::Set(d16, 8 * Map::kLo)), h, top);
  }
  return h;
}

// math::Q8MagCode<Map> of each lane of a (= x * inv); kNaN: a lane may be
// NaN (code 0), else the caller ruled NaN out for the whole block.
template <class Map, bool kNaN, class D, class DI>
HWY_INLINE hn::Vec<DI> MagCode(D d, DI di, hn::Vec<D> a) {
  constexpr int kE = 1 - Map::kLo - Map::kTop;
  const auto u = hn::And(hn::BitCast(di, a), hn::Set(di, 0x7fffffff));
  const auto c = hn::Min(u, hn::Set(di, 0x3f800000));
  // The linear steps and the 3-bit binades in one rounding: with e the
  // binade of c, at least E, adding 2^(e + 20) (ulp 2^(e - 3)) rounds c to
  // its step, ties to even, giving r = c / 2^(e - 3) in [0, 16]; the code
  // is r + 8 (e - E). (e's biased exponent bits serve as 2^(e + 20) less
  // 20 << 23 and, shifted, as 8 e.)
  const auto e_bits = hn::Max(hn::And(c, hn::Set(di, 0x7f800000)), hn::Set(di, (127 + kE) << 23));
  const auto sum =
      hn::Add(hn::BitCast(d, c), hn::BitCast(d, hn::Add(e_bits, hn::Set(di, 20 << 23))));
  auto code =
      hn::Add(hn::Sub(hn::BitCast(di, sum), e_bits),
              hn::Add(hn::ShiftRight<20>(e_bits), hn::Set(di, -(20 << 23) - 8 * (127 + kE))));
  if constexpr (Map::kTop > 0) {
    constexpr int kShift = 23 - Map::kBits;
    const auto top_lsb = hn::And(hn::ShiftRight<kShift>(c), hn::Set(di, 1));
    const auto top = hn::Add(
        hn::ShiftRight<kShift>(hn::Add(c, hn::Add(hn::Set(di, (1 << (kShift - 1)) - 1), top_lsb))),
        hn::Set(di, 8 * Map::kLo - ((127 - Map::kTop) << Map::kBits)));
    code = hn::IfThenElse(hn::Lt(c, hn::Set(di, (127 - Map::kTop) << 23)), code, top);
  }
  if constexpr (kNaN) code = hn::IfThenZeroElse(hn::Gt(u, hn::Set(di, 0x7f800000)), code);
  return code;
}

// Lanes [i, i + N) of block b as fp32 m and v.
template <class D>
HWY_INLINE void DecodeVec(D d, const math::Q8Block& b, int64_t i, hn::Vec<D>* m, hn::Vec<D>* v) {
  const hn::Rebind<int16_t, D> d16;
  const hn::Rebind<uint8_t, D> d8;
  // The code's sign (bit 7) moves to binary16's bit 15 (signed times 2^0
  // then the absmax: the scalar's order), its magnitude to bits 14..7.
  const auto k7 = hn::ShiftLeft<7>(hn::PromoteTo(d16, hn::LoadU(d8, b.m + i)));
  const auto hm = hn::Add(k7, hn::And(k7, hn::Set(d16, 0x4000)));
  static_assert(math::Q8MMap::kTop == 0 && 1 - math::Q8MMap::kLo + 14 == 0, "hm is HalfBits");
  *m = hn::Mul(ScaledHalf<math::Q8MMap>(d, hm), hn::Set(d, b.m_absmax));
  const auto hv = HalfBits<math::Q8VMap>(d16, hn::PromoteTo(d16, hn::LoadU(d8, b.v + i)));
  *v = hn::Mul(ScaledHalf<math::Q8VMap>(d, hv), hn::Set(d, b.v_absmax));
}

// One block's n <= kQ8Block elements as fp32.
HWY_INLINE void DecodeBlock(const math::Q8Block& b, int64_t n, float* m, float* v) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    hn::Vec<decltype(d)> vm, vv;
    DecodeVec(d, b, i, &vm, &vv);
    hn::StoreU(vm, d, m + i);
    hn::StoreU(vv, d, v + i);
  }
  for (; i < n; ++i) {
    m[i] = math::Q8DecodeSigned(b.m[i], b.m_absmax);
    v[i] = math::Q8DecodeUnsigned(b.v[i], b.v_absmax);
  }
}

void Q8DecodeTileImpl(const math::Q8Block* blocks, int64_t len, float* m, float* v) {
  for (int64_t a = 0; a < len; a += math::kQ8Block) {
    DecodeBlock(blocks[a / math::kQ8Block], std::min<int64_t>(math::kQ8Block, len - a), m + a,
                v + a);
  }
}

// A block's absmaxes from the moments' bits, one integer max per moment and
// vector: for non-negative non-NaN floats the integer order is the float
// order. A NaN or infinity (either moment), a v with its sign bit set, or
// an absmax whose reciprocal overflows sends the block to the exact path:
// there math::AdamUpdateQ8Block's fmaxf skips NaN, and x * inv can be NaN
// (inf * 0, 0 * inf), which codes as 0.
template <class DI>
struct AbsmaxBits {
  using DU = hn::RebindToUnsigned<DI>;
  hn::Vec<DI> m_abs;
  hn::Vec<DU> v_max;  // unsigned: a sign bit makes it >= 0x80000000
  explicit AbsmaxBits(DI di) : m_abs(hn::Zero(di)), v_max(hn::Zero(DU())) {}
  template <class V>
  HWY_INLINE void Add(DI di, V m, V v) {
    m_abs = hn::Max(m_abs, hn::And(hn::BitCast(di, m), hn::Set(di, 0x7fffffff)));
    v_max = hn::Max(v_max, hn::BitCast(DU(), v));
  }
  // True, with the absmaxes, when no lane's code can meet a NaN.
  HWY_INLINE bool Absmaxes(DI di, float* m_max, float* v_max_out) const {
    const int32_t m_bits = hn::GetLane(hn::MaxOfLanes(di, m_abs));
    const uint32_t v_bits = hn::GetLane(hn::MaxOfLanes(DU(), v_max));
    if (m_bits >= 0x7f800000 || v_bits >= 0x7f800000u) return false;
    *m_max = math::BitsFloat(static_cast<uint32_t>(m_bits));
    *v_max_out = math::BitsFloat(v_bits);
    return std::isfinite(math::Q8Inverse(*m_max)) && std::isfinite(math::Q8Inverse(*v_max_out));
  }
};

// The running absmax of m's and v's lanes: fmaxf skips NaN, so NaN lanes
// count as 0 (the moments are >= 0 or NaN).
template <class V>
HWY_INLINE void MaxVec(V m, V v, V* mx, V* vx) {
  const auto am = hn::Abs(m);
  *mx = hn::Max(*mx, hn::IfThenElseZero(hn::Eq(am, am), am));
  *vx = hn::Max(*vx, hn::IfThenElseZero(hn::Eq(v, v), v));
}

// Four vectors of codes (< 256) stored as 4 N bytes in lane order.
template <class DI, class V = hn::Vec<DI>>
HWY_INLINE void StoreCodes4(DI di, V c0, V c1, V c2, V c3, uint8_t* out) {
#if HWY_TARGET == HWY_AVX2
  // Two packs interleave the 128-bit halves; one permute restores the order
  // (three instructions where four DemoteTos take sixteen).
  (void)di;
  const __m256i bytes =
      _mm256_packus_epi16(_mm256_packs_epi32(c0.raw, c1.raw), _mm256_packs_epi32(c2.raw, c3.raw));
  const __m256i ordered =
      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
#else
  const hn::Rebind<uint8_t, DI> d8;
  const size_t N = hn::Lanes(di);
  hn::StoreU(hn::DemoteTo(d8, c0), d8, out);
  hn::StoreU(hn::DemoteTo(d8, c1), d8, out + N);
  hn::StoreU(hn::DemoteTo(d8, c2), d8, out + 2 * N);
  hn::StoreU(hn::DemoteTo(d8, c3), d8, out + 3 * N);
#endif
}

// Codes against one block's absmaxes (the encoding half of
// math::AdamUpdateQ8Block); kNaN: a lane may be NaN.
template <bool kNaN>
struct BlockEncoder {
  using D = hn::ScalableTag<float>;
  using DI = hn::RebindToSigned<D>;
  D d;
  DI di;
  float m_inv, v_inv;
  hn::Vec<D> vm_inv, vv_inv;
  BlockEncoder(float m_max, float v_max)
      : m_inv(math::Q8Inverse(m_max)),
        v_inv(math::Q8Inverse(v_max)),
        vm_inv(hn::Set(d, m_inv)),
        vv_inv(hn::Set(d, v_inv)) {}
  HWY_INLINE hn::Vec<DI> CodeM(const float* m) const {
    const auto x = hn::LoadU(d, m);
    const auto sign = hn::And(hn::ShiftRight<24>(hn::BitCast(di, x)), hn::Set(di, 0x80));
    return hn::Or(MagCode<math::Q8MMap, kNaN>(d, di, hn::Mul(x, vm_inv)), sign);
  }
  HWY_INLINE hn::Vec<DI> CodeV(const float* v) const {
    return MagCode<math::Q8VMap, kNaN>(d, di, hn::Mul(hn::LoadU(d, v), vv_inv));
  }
  // Elements [i, i + 4 N) of m and v into b.
  HWY_INLINE void Group(const float* m, const float* v, int64_t i, math::Q8Block* b) const {
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    m += i;
    v += i;
    StoreCodes4(di, CodeM(m), CodeM(m + N), CodeM(m + 2 * N), CodeM(m + 3 * N), b->m + i);
    StoreCodes4(di, CodeV(v), CodeV(v + N), CodeV(v + 2 * N), CodeV(v + 3 * N), b->v + i);
  }
  // A whole block: the absmaxes the encoder was made with and every code.
  HWY_INLINE void Whole(const float* m, const float* v, float m_max, float v_max,
                        math::Q8Block* b) const {
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    b->m_absmax = m_max;
    b->v_absmax = v_max;
    for (int64_t i = 0; i < math::kQ8Block; i += 4 * N) Group(m, v, i, b);
  }
};

// The codes of a block's n <= kQ8Block elements against the absmaxes.
template <bool kNaN>
HWY_INLINE void EncodeCodes(const float* m, const float* v, int64_t n, float m_max, float v_max,
                            math::Q8Block* b) {
  const BlockEncoder<kNaN> enc(m_max, v_max);
  const hn::Rebind<uint8_t, decltype(enc.di)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(enc.d));
  b->m_absmax = m_max;
  b->v_absmax = v_max;
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) enc.Group(m, v, i, b);
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::DemoteTo(d8, enc.CodeM(m + i)), d8, b->m + i);
    hn::StoreU(hn::DemoteTo(d8, enc.CodeV(v + i)), d8, b->v + i);
  }
  for (; i < n; ++i) {
    b->m[i] = math::Q8EncodeSigned(m[i], enc.m_inv);
    b->v[i] = math::Q8EncodeUnsigned(v[i], enc.v_inv);
  }
}

// One block's absmax and codes, n <= kQ8Block elements: the exact path,
// NaN-aware lane by lane.
HWY_INLINE void EncodeBlockExact(const float* m, const float* v, int64_t n, math::Q8Block* b) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto mx = hn::Zero(d), vx = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) MaxVec(hn::LoadU(d, m + i), hn::LoadU(d, v + i), &mx, &vx);
  float m_max = hn::GetLane(hn::MaxOfLanes(d, mx));
  float v_max = hn::GetLane(hn::MaxOfLanes(d, vx));
  for (; i < n; ++i) {
    m_max = std::fmax(m_max, std::fabs(m[i]));
    v_max = std::fmax(v_max, v[i]);
  }
  EncodeCodes<true>(m, v, n, m_max, v_max, b);
}

// A whole block: the bit maxima, then the NaN-free codes or the exact path.
HWY_INLINE void EncodeFullBlock(const float* m, const float* v, math::Q8Block* b) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  AbsmaxBits<decltype(di)> bits(di);
  for (int64_t i = 0; i < math::kQ8Block; i += N)
    bits.Add(di, hn::LoadU(d, m + i), hn::LoadU(d, v + i));
  float m_max, v_max;
  if (bits.Absmaxes(di, &m_max, &v_max))
    return BlockEncoder<false>(m_max, v_max).Whole(m, v, m_max, v_max, b);
  EncodeBlockExact(m, v, math::kQ8Block, b);
}

void Q8EncodeTileImpl(const float* m, const float* v, int64_t len, math::Q8Block* blocks) {
  int64_t a = 0;
  for (; a + math::kQ8Block <= len; a += math::kQ8Block) {
    EncodeFullBlock(m + a, v + a, blocks + a / math::kQ8Block);
  }
  if (a < len) EncodeBlockExact(m + a, v + a, len - a, blocks + a / math::kQ8Block);
}

// Whole blocks, software-pipelined: block k is decoded, updated (AdamVec)
// and its absmax bits kept in registers, its moments stored to an L1
// buffer, while block k - 1's codes are computed from the other buffer, so
// the integer rounding of the codes overlaps the divides and square roots
// of the update. A block whose bits rule out the NaN-free codes is encoded
// at once by the exact path; a partial last block takes the shared math.
template <bool kL2, bool kDecoupledWd>
HWY_INLINE void AdamQ8Loop(const math::AdamScalars& s, const float* g, float* p,
                           math::Q8Block* blocks, int64_t len) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  static_assert(math::kQ8Block % (4 * hn::MaxLanes(decltype(d)())) == 0,
                "a block is whole groups of four vectors");
  const AdamVecScalars<decltype(d)> c(d, s);
  alignas(64) float m[2][math::kQ8Block], v[2][math::kQ8Block];
  int64_t pending = -1;  // the block whose codes wait, in buffer pending & 1
  float pending_m_max = 0.0f, pending_v_max = 0.0f;
  int64_t a = 0;
  for (; a + math::kQ8Block <= len; a += math::kQ8Block) {
    const int64_t k = a / math::kQ8Block;
    math::Q8Block& b = blocks[k];
    float* bm = m[k & 1];
    float* bv = v[k & 1];
    const BlockEncoder<false> enc(pending_m_max, pending_v_max);
    AbsmaxBits<decltype(di)> bits(di);
    for (int64_t i = 0; i < math::kQ8Block; i += 4 * N) {
      for (int64_t j = i; j < i + 4 * N; j += N) {
        hn::Vec<decltype(d)> mm, vv;
        DecodeVec(d, b, j, &mm, &vv);
        const auto np = AdamVec<kL2, kDecoupledWd>(c, hn::LoadU(d, g + a + j),
                                                   hn::LoadU(d, p + a + j), &mm, &vv);
        hn::StoreU(np, d, p + a + j);
        hn::Store(mm, d, bm + j);
        hn::Store(vv, d, bv + j);
        bits.Add(di, mm, vv);
      }
      if (pending >= 0) enc.Group(m[pending & 1], v[pending & 1], i, &blocks[pending]);
    }
    if (pending >= 0) {
      blocks[pending].m_absmax = pending_m_max;
      blocks[pending].v_absmax = pending_v_max;
    }
    pending = -1;
    if (bits.Absmaxes(di, &pending_m_max, &pending_v_max)) {
      pending = k;
    } else {
      EncodeBlockExact(bm, bv, math::kQ8Block, &b);
    }
  }
  if (pending >= 0) {
    BlockEncoder<false>(pending_m_max, pending_v_max)
        .Whole(m[pending & 1], v[pending & 1], pending_m_max, pending_v_max, &blocks[pending]);
  }
  if (a < len) {
    math::AdamUpdateQ8Block(s, g + a, p + a, blocks + a / math::kQ8Block,
                            static_cast<int>(len - a));
  }
}

void AdamTileQ8MomentsImpl(const math::AdamScalars& s, const float* g, float* p,
                           math::Q8Block* blocks, int64_t len) {
  if (s.weight_decay == 0.0f) return AdamQ8Loop<false, false>(s, g, p, blocks, len);
  if (s.decoupled) return AdamQ8Loop<false, true>(s, g, p, blocks, len);
  return AdamQ8Loop<true, false>(s, g, p, blocks, len);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace zero
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zero {
namespace cpu {

HWY_EXPORT(Q8DecodeTileImpl);
HWY_EXPORT(Q8EncodeTileImpl);
HWY_EXPORT(AdamTileQ8MomentsImpl);

void Q8DecodeTile(const math::Q8Block* blocks, int64_t len, float* m, float* v) {
  HWY_DYNAMIC_DISPATCH(Q8DecodeTileImpl)(blocks, len, m, v);
}

void Q8EncodeTile(const float* m, const float* v, int64_t len, math::Q8Block* blocks) {
  HWY_DYNAMIC_DISPATCH(Q8EncodeTileImpl)(m, v, len, blocks);
}

void AdamTileQ8Moments(const math::AdamScalars& s, const float* g, float* p, math::Q8Block* blocks,
                       int64_t len) {
  HWY_DYNAMIC_DISPATCH(AdamTileQ8MomentsImpl)(s, g, p, blocks, len);
}

}  // namespace cpu
}  // namespace zero
#endif  // HWY_ONCE
