// The flat partition layout (docs/ARCHITECTURE.md, "Partitioning"): trainable params,
// flattened in registration order into groups (one per dtype and per
// sub_group_size elements), each padded to a multiple of world * align and cut
// into world equal contiguous shards. Answers "which slice of param p lives on
// rank r". Pure arithmetic: no memory, no communication.
#ifndef ZERO_CORE_PARTITION_LAYOUT_H_
#define ZERO_CORE_PARTITION_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "core/common/dtype.h"

namespace zero {

// Shard boundaries land on multiples of this many elements: 128 bytes of the
// narrowest dtype (2 bytes), so every shard of every dtype is 128-byte aligned.
constexpr int64_t kAlignElems = 64;

struct LayoutParam {
  int id;         // engine param id
  int64_t numel;
  DType dtype;
};

struct LayoutGroup {
  DType dtype;
  int64_t numel = 0;   // sum of its params' numel
  int64_t padded = 0;  // numel rounded up to world * kAlignElems
  int64_t shard = 0;   // padded / world: elements each rank owns
  std::vector<int> members;  // indices into Layout::params()
};

// Where one trainable param sits.
struct ParamPlace {
  int group;
  int64_t offset;  // first element within the group
  int64_t numel;
};

// The part of a param that falls in one rank's shard.
struct Slice {
  int64_t param_offset = 0;  // first element, relative to the param
  int64_t shard_offset = 0;  // same element, relative to the rank's shard
  int64_t numel = 0;         // 0: the param has nothing on that rank
};

class Layout {
 public:
  Layout() = default;
  Layout(const std::vector<LayoutParam>& params, int world,
         int64_t sub_group_size);

  int world() const { return world_; }
  const std::vector<LayoutGroup>& groups() const { return groups_; }
  const std::vector<LayoutParam>& params() const { return params_; }
  // Place of the i-th trainable param (index into params()).
  const ParamPlace& place(int i) const { return places_[i]; }
  Slice SliceOn(int i, int rank) const;
  // Per-rank element counts of param i (for all-gather / reduce-scatter).
  std::vector<int64_t> Counts(int i) const;
  int64_t total_numel() const;
  int64_t total_padded() const;

 private:
  int world_ = 1;
  std::vector<LayoutParam> params_;
  std::vector<LayoutGroup> groups_;
  std::vector<ParamPlace> places_;
};

}  // namespace zero

#endif  // ZERO_CORE_PARTITION_LAYOUT_H_
