#include "core/partition/layout.h"

#include <algorithm>

namespace zero {

Layout::Layout(const std::vector<LayoutParam>& params, int world,
               int64_t sub_group_size)
    : world_(world), params_(params) {
  const int64_t unit = static_cast<int64_t>(world) * kAlignElems;
  for (size_t i = 0; i < params_.size(); ++i) {
    const LayoutParam& p = params_[i];
    // A new group when the dtype changes or the sub-group would overflow; a
    // param larger than sub_group_size gets a group of its own.
    if (groups_.empty() || groups_.back().dtype != p.dtype ||
        (groups_.back().numel > 0 &&
         groups_.back().numel + p.numel > sub_group_size)) {
      LayoutGroup g;
      g.dtype = p.dtype;
      groups_.push_back(g);
    }
    LayoutGroup& g = groups_.back();
    places_.push_back({static_cast<int>(groups_.size()) - 1, g.numel, p.numel});
    g.members.push_back(static_cast<int>(i));
    g.numel += p.numel;
  }
  for (LayoutGroup& g : groups_) {
    g.padded = (g.numel + unit - 1) / unit * unit;
    g.shard = g.padded / world;
  }
}

Slice Layout::SliceOn(int i, int rank) const {
  const ParamPlace& pl = places_[i];
  const int64_t shard = groups_[pl.group].shard;
  const int64_t lo = std::max(pl.offset, shard * rank);
  const int64_t hi = std::min(pl.offset + pl.numel, shard * (rank + 1));
  Slice s;
  if (hi <= lo) return s;
  s.param_offset = lo - pl.offset;
  s.shard_offset = lo - shard * rank;
  s.numel = hi - lo;
  return s;
}

std::vector<int64_t> Layout::Counts(int i) const {
  std::vector<int64_t> c(world_);
  for (int r = 0; r < world_; ++r) c[r] = SliceOn(i, r).numel;
  return c;
}

int64_t Layout::total_numel() const {
  int64_t n = 0;
  for (const auto& g : groups_) n += g.numel;
  return n;
}

int64_t Layout::total_padded() const {
  int64_t n = 0;
  for (const auto& g : groups_) n += g.padded;
  return n;
}

}  // namespace zero
