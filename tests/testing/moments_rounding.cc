#include "tests/testing/moments_rounding.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/partition/layout.h"

namespace zero {
namespace testing {

std::vector<double> DynamicMap(bool is_signed) {
  const int decades = is_signed ? 7 : 8;
  std::vector<double> map = {0.0};
  for (int i = 0; i < decades; ++i) {
    const int points = 1 << i;
    for (int j = 1; j <= points; ++j) {
      const double x = std::pow(10.0, i - decades + 1) * (0.1 + 0.9 * j / points);
      map.push_back(static_cast<float>(x));
    }
  }
  return map;
}

double NearestInMap(const std::vector<double>& map, double x) {
  auto hi = std::upper_bound(map.begin(), map.end(), x);
  if (hi == map.begin()) return map.front();
  if (hi == map.end()) return map.back();
  const double lo = *(hi - 1);
  return *hi - x < x - lo ? *hi : lo;
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
  const std::vector<double> smap = DynamicMap(true), umap = DynamicMap(false);
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
        const double mag = mmax > 0 ? NearestInMap(smap, std::fabs(x) / mmax) : 0.0;
        x = std::copysign(mag * mmax, x);
        y = vmax > 0 ? NearestInMap(umap, y / vmax) * vmax : 0.0;
      }
    }
  }
}

}  // namespace testing
}  // namespace zero
