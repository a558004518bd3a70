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

// math::Q8MagValue<Map> of each lane's code k.
template <class Map, class D, class DI, class VI>
HWY_INLINE hn::Vec<D> MagValue(D d, DI di, VI k) {
  constexpr int kE = 1 - Map::kLo - Map::kTop;
  const auto low = hn::BitCast(d, hn::ShiftLeft<20>(hn::Add(k, hn::Set(di, 8 * (126 + kE)))));
  const auto linear = hn::Mul(hn::ConvertTo(d, k), hn::BitCast(d, hn::Set(di, (124 + kE) << 23)));
  auto value = hn::IfThenElse(hn::RebindMask(d, hn::Lt(k, hn::Set(di, 8))), linear, low);
  if constexpr (Map::kTop > 0) {
    const auto top = hn::BitCast(
        d, hn::ShiftLeft<23 - Map::kBits>(hn::Add(
               k, hn::Set(di, ((127 - Map::kTop) << Map::kBits) - 8 * Map::kLo))));
    value = hn::IfThenElse(hn::RebindMask(d, hn::Lt(k, hn::Set(di, 8 * Map::kLo))), value, top);
  }
  return value;
}

// math::Q8MagCode<Map> of each lane of a (= x * inv).
template <class Map, class D, class DI>
HWY_INLINE hn::Vec<DI> MagCode(D d, DI di, hn::Vec<D> a) {
  constexpr int kE = 1 - Map::kLo - Map::kTop;
  const auto u = hn::And(hn::BitCast(di, a), hn::Set(di, 0x7fffffff));
  const auto is_nan = hn::Gt(u, hn::Set(di, 0x7f800000));
  const auto c = hn::Min(u, hn::Set(di, 0x3f800000));
  const auto magic = hn::Set(di, (147 + kE) << 23);
  const auto sum = hn::Add(hn::BitCast(d, c), hn::BitCast(d, magic));
  const auto linear = hn::Sub(hn::BitCast(di, sum), magic);
  const auto lsb = hn::And(hn::ShiftRight<20>(c), hn::Set(di, 1));
  const auto low = hn::Sub(hn::ShiftRight<20>(hn::Add(c, hn::Add(hn::Set(di, 0x7ffff), lsb))),
                           hn::Set(di, 8 * (126 + kE)));
  auto code = hn::IfThenElse(hn::Lt(c, hn::Set(di, (127 + kE) << 23)), linear, low);
  if constexpr (Map::kTop > 0) {
    constexpr int kShift = 23 - Map::kBits;
    const auto top_lsb = hn::And(hn::ShiftRight<kShift>(c), hn::Set(di, 1));
    const auto top = hn::Add(
        hn::ShiftRight<kShift>(hn::Add(c, hn::Add(hn::Set(di, (1 << (kShift - 1)) - 1), top_lsb))),
        hn::Set(di, 8 * Map::kLo - ((127 - Map::kTop) << Map::kBits)));
    code = hn::IfThenElse(hn::Lt(c, hn::Set(di, (127 - Map::kTop) << 23)), code, top);
  }
  return hn::IfThenZeroElse(is_nan, code);
}

// Lanes [i, i + N) of block b as fp32 m and v.
template <class D>
HWY_INLINE void DecodeVec(D d, const math::Q8Block& b, int64_t i, hn::Vec<D>* m, hn::Vec<D>* v) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const auto cm = hn::PromoteTo(di, hn::LoadU(d8, b.m + i));
  const auto cv = hn::PromoteTo(di, hn::LoadU(d8, b.v + i));
  const auto mag = MagValue<math::Q8MMap>(d, di, hn::And(cm, hn::Set(di, 0x7f)));
  const auto sign = hn::BitCast(d, hn::ShiftLeft<24>(hn::And(cm, hn::Set(di, 0x80))));
  *m = hn::Mul(hn::Or(mag, sign), hn::Set(d, b.m_absmax));
  *v = hn::Mul(MagValue<math::Q8VMap>(d, di, cv), hn::Set(d, b.v_absmax));
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

// The running absmax of m's and v's lanes: fmaxf skips NaN, so NaN lanes
// count as 0 (the moments are >= 0 or NaN).
template <class V>
HWY_INLINE void MaxVec(V m, V v, V* mx, V* vx) {
  const auto am = hn::Abs(m);
  *mx = hn::Max(*mx, hn::IfThenElseZero(hn::Eq(am, am), am));
  *vx = hn::Max(*vx, hn::IfThenElseZero(hn::Eq(v, v), v));
}

// The codes of a block's n <= kQ8Block elements against the absmaxes: the
// encoding half of math::AdamUpdateQ8Block.
HWY_INLINE void EncodeCodes(const float* m, const float* v, int64_t n, float m_max, float v_max,
                            math::Q8Block* b) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  b->m_absmax = m_max;
  b->v_absmax = v_max;
  const float m_inv = math::Q8Inverse(m_max), v_inv = math::Q8Inverse(v_max);
  const auto vm_inv = hn::Set(d, m_inv), vv_inv = hn::Set(d, v_inv);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::LoadU(d, m + i);
    const auto sign = hn::And(hn::ShiftRight<24>(hn::BitCast(di, x)), hn::Set(di, 0x80));
    const auto cm = hn::Or(MagCode<math::Q8MMap>(d, di, hn::Mul(x, vm_inv)), sign);
    const auto cv = MagCode<math::Q8VMap>(d, di, hn::Mul(hn::LoadU(d, v + i), vv_inv));
    hn::StoreU(hn::DemoteTo(d8, cm), d8, b->m + i);
    hn::StoreU(hn::DemoteTo(d8, cv), d8, b->v + i);
  }
  for (; i < n; ++i) {
    b->m[i] = math::Q8EncodeSigned(m[i], m_inv);
    b->v[i] = math::Q8EncodeUnsigned(v[i], v_inv);
  }
}

// One block's absmax and codes, n <= kQ8Block elements.
HWY_INLINE void EncodeBlock(const float* m, const float* v, int64_t n, math::Q8Block* b) {
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
  EncodeCodes(m, v, n, m_max, v_max, b);
}

void Q8EncodeTileImpl(const float* m, const float* v, int64_t len, math::Q8Block* blocks) {
  for (int64_t a = 0; a < len; a += math::kQ8Block) {
    EncodeBlock(m + a, v + a, std::min<int64_t>(math::kQ8Block, len - a),
                blocks + a / math::kQ8Block);
  }
}

// Whole blocks: decode, AdamVec and the running absmax in registers, the
// updated moments through an L1 copy to the encoder; a partial last block
// takes the shared math.
template <bool kL2, bool kDecoupledWd>
HWY_INLINE void AdamQ8Loop(const math::AdamScalars& s, const float* g, float* p,
                           math::Q8Block* blocks, int64_t len) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const AdamVecScalars<decltype(d)> c(d, s);
  alignas(64) float m[math::kQ8Block], v[math::kQ8Block];
  int64_t a = 0;
  for (; a + math::kQ8Block <= len; a += math::kQ8Block) {
    math::Q8Block& b = blocks[a / math::kQ8Block];
    auto mx = hn::Zero(d), vx = hn::Zero(d);
    for (int64_t i = 0; i < math::kQ8Block; i += N) {
      hn::Vec<decltype(d)> mm, vv;
      DecodeVec(d, b, i, &mm, &vv);
      const auto np =
          AdamVec<kL2, kDecoupledWd>(c, hn::LoadU(d, g + a + i), hn::LoadU(d, p + a + i), &mm, &vv);
      hn::StoreU(np, d, p + a + i);
      hn::Store(mm, d, m + i);
      hn::Store(vv, d, v + i);
      MaxVec(mm, vv, &mx, &vx);
    }
    EncodeCodes(m, v, math::kQ8Block, hn::GetLane(hn::MaxOfLanes(d, mx)),
                hn::GetLane(hn::MaxOfLanes(d, vx)), &b);
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

void AdamTileQ8Moments(const math::AdamScalars& s, const float* g, float* p,
                       math::Q8Block* blocks, int64_t len) {
  HWY_DYNAMIC_DISPATCH(AdamTileQ8MomentsImpl)(s, g, p, blocks, len);
}

}  // namespace cpu
}  // namespace zero
#endif  // HWY_ONCE
