// Compiled once per SIMD target by hwy/foreach_target.h; the HWY_ONCE part
// at the end dispatches to the best target the CPU supports.
#include "kernels/cpu/q8_codec_simd.h"

#include <algorithm>
#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/q8_codec_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace zero {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// math::Q8MagValue of each lane's code k (kBinades: the map's).
template <int kBinades, class D, class DI, class VI>
HWY_INLINE hn::Vec<D> MagValue(D d, DI di, VI k) {
  const auto normal = hn::BitCast(d, hn::ShiftLeft<20>(hn::Add(k, hn::Set(di, 8 * (127 - kBinades)))));
  const auto linear =
      hn::Mul(hn::ConvertTo(d, k), hn::BitCast(d, hn::Set(di, (125 - kBinades) << 23)));
  return hn::IfThenElse(hn::RebindMask(d, hn::Lt(k, hn::Set(di, 8))), linear, normal);
}

// math::Q8MagCode of each lane of a (= x * inv).
template <int kBinades, class D, class DI>
HWY_INLINE hn::Vec<DI> MagCode(D d, DI di, hn::Vec<D> a) {
  const auto u = hn::And(hn::BitCast(di, a), hn::Set(di, 0x7fffffff));
  const auto is_nan = hn::Gt(u, hn::Set(di, 0x7f800000));
  const auto c = hn::Min(u, hn::Set(di, 0x3f800000));
  const auto magic = hn::Set(di, (148 - kBinades) << 23);
  const auto linear = hn::Sub(hn::BitCast(di, hn::Add(hn::BitCast(d, c), hn::BitCast(d, magic))), magic);
  const auto lsb = hn::And(hn::ShiftRight<20>(c), hn::Set(di, 1));
  const auto normal = hn::Sub(hn::ShiftRight<20>(hn::Add(c, hn::Add(hn::Set(di, 0x7ffff), lsb))),
                              hn::Set(di, 8 * (127 - kBinades)));
  const auto code = hn::IfThenElse(hn::Lt(c, hn::Set(di, (128 - kBinades) << 23)), linear, normal);
  return hn::IfThenZeroElse(is_nan, code);
}

// One block's n <= kQ8Block elements as fp32.
HWY_INLINE void DecodeBlock(const math::Q8Block& b, int64_t n, float* m, float* v) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto m_max = hn::Set(d, b.m_absmax), v_max = hn::Set(d, b.v_absmax);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto cm = hn::PromoteTo(di, hn::LoadU(d8, b.m + i));
    const auto cv = hn::PromoteTo(di, hn::LoadU(d8, b.v + i));
    const auto mag = MagValue<math::kQ8MBinades>(d, di, hn::And(cm, hn::Set(di, 0x7f)));
    const auto sign = hn::BitCast(d, hn::ShiftLeft<24>(hn::And(cm, hn::Set(di, 0x80))));
    // (-mag) * absmax: the same bits as -(mag * absmax).
    hn::StoreU(hn::Mul(hn::Or(mag, sign), m_max), d, m + i);
    hn::StoreU(hn::Mul(MagValue<math::kQ8VBinades>(d, di, cv), v_max), d, v + i);
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

// One block's absmax and codes: the encoding half of
// math::AdamUpdateQ8Block, n <= kQ8Block elements.
HWY_INLINE void EncodeBlock(const float* m, const float* v, int64_t n, math::Q8Block* b) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  // fmaxf skips NaN: NaN lanes count as 0 (the moments are >= 0 or NaN).
  auto mx = hn::Zero(d), vx = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto am = hn::Abs(hn::LoadU(d, m + i));
    const auto vv = hn::LoadU(d, v + i);
    mx = hn::Max(mx, hn::IfThenElseZero(hn::Eq(am, am), am));
    vx = hn::Max(vx, hn::IfThenElseZero(hn::Eq(vv, vv), vv));
  }
  float m_max = hn::GetLane(hn::MaxOfLanes(d, mx));
  float v_max = hn::GetLane(hn::MaxOfLanes(d, vx));
  for (; i < n; ++i) {
    m_max = std::fmax(m_max, std::fabs(m[i]));
    v_max = std::fmax(v_max, v[i]);
  }
  b->m_absmax = m_max;
  b->v_absmax = v_max;
  const float m_inv = math::Q8Inverse(m_max), v_inv = math::Q8Inverse(v_max);
  const auto vm_inv = hn::Set(d, m_inv), vv_inv = hn::Set(d, v_inv);
  for (i = 0; i + N <= n; i += N) {
    const auto x = hn::LoadU(d, m + i);
    const auto sign = hn::And(hn::ShiftRight<24>(hn::BitCast(di, x)), hn::Set(di, 0x80));
    const auto cm = hn::Or(MagCode<math::kQ8MBinades>(d, di, hn::Mul(x, vm_inv)), sign);
    const auto cv = MagCode<math::kQ8VBinades>(d, di, hn::Mul(hn::LoadU(d, v + i), vv_inv));
    hn::StoreU(hn::DemoteTo(d8, cm), d8, b->m + i);
    hn::StoreU(hn::DemoteTo(d8, cv), d8, b->v + i);
  }
  for (; i < n; ++i) {
    b->m[i] = math::Q8EncodeSigned(m[i], m_inv);
    b->v[i] = math::Q8EncodeUnsigned(v[i], v_inv);
  }
}

void Q8EncodeTileImpl(const float* m, const float* v, int64_t len, math::Q8Block* blocks) {
  for (int64_t a = 0; a < len; a += math::kQ8Block) {
    EncodeBlock(m + a, v + a, std::min<int64_t>(math::kQ8Block, len - a),
                blocks + a / math::kQ8Block);
  }
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

void Q8DecodeTile(const math::Q8Block* blocks, int64_t len, float* m, float* v) {
  HWY_DYNAMIC_DISPATCH(Q8DecodeTileImpl)(blocks, len, m, v);
}

void Q8EncodeTile(const float* m, const float* v, int64_t len, math::Q8Block* blocks) {
  HWY_DYNAMIC_DISPATCH(Q8EncodeTileImpl)(m, v, len, blocks);
}

}  // namespace cpu
}  // namespace zero
#endif  // HWY_ONCE
