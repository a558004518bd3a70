#include "core/ckpt/snapshot.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "kernels/cast_math.h"

namespace zero {
namespace ckpt {
namespace {

// This rank's saved span of `p`: from the first to the end of the last of
// its slices (they lie within the owned range); numel 0 if none.
RankSlice SavedSpan(const ParamView& p, int rank) {
  RankSlice span{rank, 0, 0};
  int64_t lo = -1, hi = -1;
  for (const RankSlice& s : p.slices) {
    if (s.rank != rank) continue;
    lo = lo < 0 ? s.offset : std::min(lo, s.offset);
    hi = std::max(hi, s.offset + s.numel);
  }
  if (lo >= 0) span = {rank, lo, hi - lo};
  return span;
}

int NumKinds(const ShardView& v) { return 1 + static_cast<int>(v.states.size()); }

}  // namespace

void HostToF32(const void* src, DType t, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::kF32: dst[i] = static_cast<const float*>(src)[i]; break;
      case DType::kF16: dst[i] = math::HalfToFloat(static_cast<const uint16_t*>(src)[i]); break;
      case DType::kBF16: dst[i] = math::Bf16ToFloat(static_cast<const uint16_t*>(src)[i]); break;
    }
  }
}

absl::StatusOr<float*> SnapshotBuffer::Reserve(Device* owner, int64_t floats) {
  floats = std::max<int64_t>(floats, 1);
  if (data_ != nullptr && owner == owner_ && floats <= capacity_) return data_;
  Release();
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  void* p = nullptr;
  if (owner != nullptr) {
    ASSIGN_OR_RETURN(p, owner->AllocateHost(bytes, /*pinned=*/true));
  } else {
    p = std::malloc(bytes);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("async save: no host memory for the snapshot (", bytes, " bytes)"));
    }
  }
  owner_ = owner;
  data_ = static_cast<float*>(p);
  capacity_ = floats;
  return data_;
}

void SnapshotBuffer::Release() {
  if (data_ == nullptr) return;
  if (owner_ != nullptr) {
    owner_->FreeHost(data_, /*pinned=*/true);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  capacity_ = 0;
}

int64_t SnapshotFloats(const ShardView& v) {
  int64_t n = 0;
  for (const ParamView& p : v.params) {
    if (!p.trainable) {
      if (v.rank == 0) n += p.numel;
      continue;
    }
    n += SavedSpan(p, v.rank).numel * NumKinds(v);
  }
  return n;
}

absl::StatusOr<ShardView> TakeSnapshot(const ShardView& live, SnapshotBuffer* buf) {
  // Device state is downloaded by the device that holds it; the buffer is
  // that device's (page-locked) host memory.
  Device* owner = live.state_device != nullptr ? live.state_device : live.device;
  ASSIGN_OR_RETURN(float* at, buf->Reserve(owner, SnapshotFloats(live)));
  ShardView v = live;
  v.device = nullptr;
  v.state_device = nullptr;
  std::vector<int> kinds = {kMaster};
  kinds.insert(kinds.end(), live.states.begin(), live.states.end());
  for (ParamView& p : v.params) {
    if (!p.trainable) {
      if (v.rank == 0) {
        if (live.device != nullptr) {
          live.device->DownloadF32(p.whole, p.dtype, at, p.numel);
        } else {
          HostToF32(p.whole, p.dtype, at, p.numel);
        }
        p.whole_f32 = at;
        at += p.numel;
      }
      p.whole = nullptr;
      continue;
    }
    const RankSlice span = SavedSpan(p, v.rank);
    const int64_t base = span.offset - p.own_offset;  // owned index of the span
    for (int k : kinds) {
      float* dst = nullptr;
      if (span.numel > 0) {
        dst = at;
        at += span.numel;
        if (p.state[k] != nullptr) {
          if (live.state_device != nullptr) {
            live.state_device->DownloadF32(p.state[k] + base, DType::kF32, dst, span.numel);
          } else {
            std::memcpy(dst, p.state[k] + base, static_cast<size_t>(span.numel) * sizeof(float));
          }
        } else if (p.io) {
          absl::Status s = p.io(k, base, span.numel, dst, /*write=*/false);
          if (!s.ok()) {
            return absl::Status(s.code(), absl::StrCat("async save: param '", p.name,
                                                       "': reading its ", StateName(k),
                                                       " state: ", s.message()));
          }
        } else {
          return absl::InternalError(absl::StrCat("async save: param '", p.name, "' has no ",
                                                  StateName(k), " state"));
        }
      }
      p.state[k] = dst;
    }
    for (int k = 0; k < kNumStates; ++k) {
      if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) p.state[k] = nullptr;
    }
    p.own_offset = span.offset;
    p.own_numel = span.numel;
    p.io = nullptr;
  }
  return v;
}

}  // namespace ckpt
}  // namespace zero
