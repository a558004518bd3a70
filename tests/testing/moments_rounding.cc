#include "tests/testing/moments_rounding.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/partition/layout.h"

namespace zero {
namespace testing {

std::vector<double> MinifloatMap(bool is_signed) {
  // exp_avg: 15 runs of 8 values; exp_avg_sq: 19 runs of 8, then 32 values
  // in each of the 3 binades below 1.
  const int low_runs = is_signed ? 15 : 19, top_binades = is_signed ? 0 : 3, top_values = 32;
  const int e = 1 - low_runs - top_binades;  // the smallest binade 2^e
  std::vector<double> map;
  for (int k = 0; k < 8; ++k) map.push_back(std::ldexp(k / 8.0, e));
  for (int b = e; b < -top_binades; ++b) {
    for (int j = 0; j < 8; ++j) map.push_back(std::ldexp(1.0 + j / 8.0, b));
  }
  for (int b = -top_binades; b < 0; ++b) {
    for (int j = 0; j < top_values; ++j) map.push_back(std::ldexp(1.0 + j / double(top_values), b));
  }
  map.push_back(1.0);
  return map;
}

int NearestCode(const std::vector<double>& map, double x) {
  auto hi = std::upper_bound(map.begin(), map.end(), x);
  if (hi == map.begin()) return 0;
  const int h = static_cast<int>(hi - map.begin());
  if (hi == map.end()) return h - 1;
  const double up = *hi - x, down = x - *(hi - 1);
  if (up != down) return up < down ? h : h - 1;
  return h % 2 == 0 ? h : h - 1;
}

double RoundBf16(double x) {
  const float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

Config ReferenceHyperParams(const Config& c) {
  Config r = c;
  if (c.moments_format == MomentsFormat::kF32) return r;
  for (double* x : {&r.lr, &r.beta1, &r.beta2, &r.eps, &r.weight_decay}) {
    *x = static_cast<float>(*x);
  }
  return r;
}

void RoundMoments(const Config& c, const std::vector<bool>& trainable,
                  std::vector<std::vector<double>>* m, std::vector<std::vector<double>>* v) {
  if (c.moments_format == MomentsFormat::kF32) return;
  if (c.moments_format == MomentsFormat::kBf16) {
    for (auto* arr : {m, v}) {
      for (std::vector<double>& p : *arr) {
        for (double& x : p) x = RoundBf16(x);
      }
    }
    return;
  }
  // 8-bit: blocks of 64 elements of each group's flat layout (the same at
  // every world size: shards are multiples of 64 elements).
  std::vector<LayoutParam> lp;
  std::vector<size_t> index;  // layout param -> param
  for (size_t i = 0; i < m->size(); ++i) {
    if (!trainable[i]) continue;
    lp.push_back({static_cast<int>(i), static_cast<int64_t>((*m)[i].size()), c.dtype});
    index.push_back(i);
  }
  const Layout layout(lp, 1, c.sub_group_size);
  struct Ref {
    size_t param;
    int64_t k;
  };
  std::vector<std::vector<std::vector<Ref>>> blocks(layout.groups().size());
  for (size_t i = 0; i < index.size(); ++i) {
    const ParamPlace& pl = layout.place(static_cast<int>(i));
    auto& g = blocks[pl.group];
    for (int64_t k = 0; k < lp[i].numel; ++k) {
      const size_t b = static_cast<size_t>((pl.offset + k) / 64);
      if (g.size() <= b) g.resize(b + 1);
      g[b].push_back({index[i], k});
    }
  }
  const std::vector<double> smap = MinifloatMap(true), umap = MinifloatMap(false);
  for (auto& g : blocks) {
    for (const std::vector<Ref>& block : g) {
      double mmax = 0, vmax = 0;
      for (const Ref& r : block) {
        mmax = std::max(mmax, std::fabs((*m)[r.param][r.k]));
        vmax = std::max(vmax, (*v)[r.param][r.k]);
      }
      // The store keeps the absmax in fp32.
      mmax = static_cast<float>(mmax);
      vmax = static_cast<float>(vmax);
      for (const Ref& r : block) {
        double& x = (*m)[r.param][r.k];
        double& y = (*v)[r.param][r.k];
        const double mag = mmax > 0 ? smap[NearestCode(smap, std::fabs(x) / mmax)] : 0.0;
        x = std::copysign(mag * mmax, x);
        y = vmax > 0 ? umap[NearestCode(umap, y / vmax)] * vmax : 0.0;
      }
    }
  }
}

}  // namespace testing
}  // namespace zero
