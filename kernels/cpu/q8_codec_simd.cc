// Compiled once per SIMD target by hwy/foreach_target.h; the HWY_ONCE part
// at the end builds the tables and dispatches to the best target.
#include "kernels/cpu/q8_codec_simd.h"

#include <algorithm>
#include <cmath>
#include <vector>

#ifndef ZERO_KERNELS_CPU_Q8_CODEC_TABLES_
#define ZERO_KERNELS_CPU_Q8_CODEC_TABLES_
namespace zero {
namespace cpu {
namespace q8_codec {

// One map's encoder: entry[(bits >> 15) - base] = code at the bucket's
// start << 16 | low 15 bits of the step point inside it (0x8000: none).
// Buckets below `base` hold no step point and code 0.
struct EncodeTable {
  int32_t base = 0;
  std::vector<int32_t> entry;
};

struct Tables {
  math::Q8Maps maps;
  float dec_m[256];  // Q8DecodeSigned's value before the absmax
  EncodeTable enc_m, enc_v;
  bool hold = true;
};

const Tables& GetTables();

}  // namespace q8_codec
}  // namespace cpu
}  // namespace zero
#endif  // ZERO_KERNELS_CPU_Q8_CODEC_TABLES_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/q8_codec_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace zero {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void Q8DecodeTileImpl(const math::Q8Block* blocks, int64_t len, float* m, float* v) {
  const q8_codec::Tables& t = q8_codec::GetTables();
  for (int64_t a = 0; a < len; a += math::kQ8Block) {
    const math::Q8Block& b = blocks[a / math::kQ8Block];
    const int64_t n = std::min<int64_t>(math::kQ8Block, len - a);
    // Scalar loads: faster than AVX2 gathers on the CPUs measured
    // (bench/README.md); the same products as Q8DecodeSigned/Unsigned.
    for (int64_t i = 0; i < n; ++i) {
      m[a + i] = t.dec_m[b.m[i]] * b.m_absmax;
      v[a + i] = t.maps.uns[b.v[i]] * b.v_absmax;
    }
  }
}

// Q8Nearest of a (every lane in [0, 1]) through the bucket table.
template <class DI, class VI>
HWY_INLINE VI Nearest(DI di, const q8_codec::EncodeTable& e, VI bits) {
  const auto idx = hn::Max(hn::Sub(hn::ShiftRight<15>(bits), hn::Set(di, e.base)), hn::Zero(di));
  // Lane by lane through memory: faster than an AVX2 gather here.
  alignas(HWY_MAX_BYTES) int32_t ix[HWY_MAX_BYTES / 4], en[HWY_MAX_BYTES / 4];
  hn::Store(idx, di, ix);
  for (size_t j = 0; j < hn::Lanes(di); ++j) en[j] = e.entry[ix[j]];
  const auto entry = hn::Load(di, en);
  const auto low = hn::And(bits, hn::Set(di, 0x7fff));
  const auto step = hn::And(entry, hn::Set(di, 0xffff));
  const auto reached = hn::Gt(hn::Add(low, hn::Set(di, 1)), step);  // low >= step
  return hn::Sub(hn::ShiftRight<16>(entry), hn::VecFromMask(di, reached));
}

// One block's absmax and codes: the encoding half of
// math::AdamUpdateQ8Block, n <= kQ8Block elements.
void EncodeBlock(const q8_codec::Tables& t, const float* m, const float* v, int64_t n,
                 math::Q8Block* b) {
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
  const auto vm = hn::Set(d, m_max), vv_max = hn::Set(d, v_max);
  const bool m_pos = m_max > 0.0f, v_pos = v_max > 0.0f;
  const auto above_one = hn::Set(di, 0x3f800001);
  const auto c128 = hn::Set(di, 128);
  i = 0;
  if (t.hold) {
    for (; i + N <= n; i += N) {
      const auto x = hn::LoadU(d, m + i);
      const auto am = hn::BitCast(di, m_pos ? hn::Div(hn::Abs(x), vm) : hn::Zero(d));
      const auto av = hn::BitCast(di, v_pos ? hn::Div(hn::LoadU(d, v + i), vv_max) : hn::Zero(d));
      // Both ratios' bits in [+0, 1]; otherwise (NaN) the scalar math.
      const auto in_m = hn::And(hn::Gt(am, hn::Set(di, -1)), hn::Lt(am, above_one));
      const auto in_v = hn::And(hn::Gt(av, hn::Set(di, -1)), hn::Lt(av, above_one));
      if (!hn::AllTrue(di, hn::And(in_m, in_v))) break;
      const auto km = Nearest(di, t.enc_m, am);
      const auto neg = hn::RebindMask(di, hn::Lt(x, hn::Zero(d)));
      const auto cm = hn::IfThenElse(neg, hn::Sub(c128, km), hn::Add(c128, km));
      hn::StoreU(hn::DemoteTo(d8, cm), d8, b->m + i);
      hn::StoreU(hn::DemoteTo(d8, Nearest(di, t.enc_v, av)), d8, b->v + i);
    }
  }
  for (; i < n; ++i) {
    b->m[i] = math::Q8EncodeSigned(t.maps, m[i], m_max);
    b->v[i] = math::Q8EncodeUnsigned(t.maps, v[i], v_max);
  }
}

void Q8EncodeTileImpl(const float* m, const float* v, int64_t len, math::Q8Block* blocks) {
  const q8_codec::Tables& t = q8_codec::GetTables();
  for (int64_t a = 0; a < len; a += math::kQ8Block) {
    EncodeBlock(t, m + a, v + a, std::min<int64_t>(math::kQ8Block, len - a),
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
namespace q8_codec {
namespace {

constexpr uint32_t kOneBits = 0x3f800000u;

// Step points by bisection over the float bits of [0, 1] (Q8Nearest is
// monotone there), then one entry per bucket.
EncodeTable BuildEncodeTable(const float* t, int n, bool* hold) {
  auto code = [&](uint32_t u) { return math::Q8Nearest(t, n, math::BitsFloat(u)); };
  std::vector<uint32_t> step(n, kOneBits + 1);  // kOneBits + 1: never reached
  for (int j = 1; j < n && code(kOneBits) >= j; ++j) {
    uint32_t lo = 0, hi = kOneBits;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      if (code(mid) >= j) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    step[j] = lo;
  }
  EncodeTable e;
  e.base = std::max<int32_t>(0, static_cast<int32_t>(step[1] >> 15) - 1);
  const int32_t buckets = static_cast<int32_t>(kOneBits >> 15) - e.base + 1;
  e.entry.resize(buckets);
  for (int32_t k = 0; k < buckets; ++k) {
    e.entry[k] = code(static_cast<uint32_t>(e.base + k) << 15) << 16 | 0x8000;
  }
  for (int j = 1; j < n && step[j] <= kOneBits; ++j) {
    if ((step[j] & 0x7fffu) == 0) continue;  // at a bucket's start: its code
    int32_t& x = e.entry[static_cast<int32_t>(step[j] >> 15) - e.base];
    if ((x & 0xffff) != 0x8000 || (x >> 16) != j - 1) *hold = false;
    x = (x & ~0xffff) | static_cast<int32_t>(step[j] & 0x7fffu);
  }
  return e;
}

Tables MakeTables() {
  Tables t;
  t.maps = math::MakeQ8Maps();
  for (int c = 0; c < 256; ++c) t.dec_m[c] = math::Q8DecodeSigned(t.maps, static_cast<uint8_t>(c), 1.0f);
  t.enc_m = BuildEncodeTable(t.maps.mag, 128, &t.hold);
  t.enc_v = BuildEncodeTable(t.maps.uns, 256, &t.hold);
  return t;
}

}  // namespace

const Tables& GetTables() {
  static const Tables t = MakeTables();
  return t;
}

}  // namespace q8_codec

HWY_EXPORT(Q8DecodeTileImpl);
HWY_EXPORT(Q8EncodeTileImpl);

void Q8DecodeTile(const math::Q8Block* blocks, int64_t len, float* m, float* v) {
  HWY_DYNAMIC_DISPATCH(Q8DecodeTileImpl)(blocks, len, m, v);
}

void Q8EncodeTile(const float* m, const float* v, int64_t len, math::Q8Block* blocks) {
  HWY_DYNAMIC_DISPATCH(Q8EncodeTileImpl)(m, v, len, blocks);
}

bool Q8EncoderTablesHold() { return q8_codec::GetTables().hold; }

}  // namespace cpu
}  // namespace zero
#endif  // HWY_ONCE
