#include "core/engine/memory_state_store.h"

#include <algorithm>
#include <vector>

#include "core/common/status_macros.h"
#include "core/engine/packed_moments.h"
#include "kernels/cpu/moments_format_step.h"

namespace zero {

absl::Status DeviceStateStore::Allocate(const std::vector<int64_t>& owned_lens,
                                        ShardedState* working) {
  const int arrays = StateArrays(ctx_->config);
  packed_ = PackedFormat(ctx_->config) != 0;
  groups_.resize(owned_lens.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].len = owned_lens[g];
    if (working != nullptr) {
      groups_[g].alias = reinterpret_cast<float*>(working->OwnedWorking(static_cast<int>(g), 0));
    }
    for (int a = groups_[g].alias != nullptr ? 1 : 0; a < arrays; ++a) {
      ASSIGN_OR_RETURN(groups_[g].a[a], DeviceBuffer::Make(mem_, StateArrayBytes(
                                                                  ctx_->config, a, owned_lens[g])));
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceStateStore::Initialize(const InitVisitor& init) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    // Aliased: the same values the working copy was filled with, again.
    float* master = Array(static_cast<int>(g), 0);
    init(static_cast<int>(g), 0, groups_[g].len, [&](int64_t at, int64_t len, const float* src) {
      mem_->UploadF32(src, master + at, DType::kF32, len);
    });
  }
  return absl::OkStatus();
}

absl::Status DeviceStateStore::Update(const OptimizerUpdate& u) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    Arrays& s = groups_[g];
    float* m = s.a[1].data<float>();
    float* v = s.a[2].data<float>();
    const bool packed = packed_;
    for (int64_t b = 0; b < s.len; b += u.piece) {
      const int64_t len = std::min(u.piece, s.len - b);
      float* s1 = packed ? Packed(static_cast<int>(g), b) : m ? m + b : nullptr;
      RETURN_IF_ERROR(u.on_device(static_cast<int>(g), b, len, Array(static_cast<int>(g), 0) + b,
                                  s1, !packed && v ? v + b : nullptr));
    }
  }
  return absl::OkStatus();
}

float* DeviceStateStore::Packed(int g, int64_t begin) const {
  if (!packed_) return nullptr;
  return reinterpret_cast<float*>(groups_[g].a[1].data<char>() +
                                  StateArrayOffset(ctx_->config, 1, begin));
}

absl::Status DeviceStateStore::Read(int g, int array, int64_t begin, int64_t len, float* out) {
  if (array > 0 && packed_ && Array(g, array) == nullptr) {
    return ReadPackedMoment(PackedFormat(ctx_->config), array, begin, len, out,
                            [&](int64_t first, int64_t n, void* bytes) {
                              mem_->Copy(bytes, Packed(g, first),
                                         StateArrayBytes(ctx_->config, 1, n));
                              return absl::OkStatus();
                            });
  }
  const float* b = Array(g, array);
  if (b == nullptr) return absl::InvalidArgumentError("read_owned_state: no such state");
  mem_->DownloadF32(b + begin, DType::kF32, out, len);
  return absl::OkStatus();
}

absl::Status DeviceStateStore::Write(int g, int array, int64_t begin, int64_t len,
                                     const float* in) {
  if (array > 0 && packed_ && Array(g, array) == nullptr) {
    return WritePackedMoment(
        PackedFormat(ctx_->config), array, begin, len, in,
        [&](int64_t first, int64_t n, void* bytes) {
          mem_->Copy(bytes, Packed(g, first), StateArrayBytes(ctx_->config, 1, n));
          return absl::OkStatus();
        },
        [&](int64_t first, int64_t n, void* bytes) {
          mem_->Copy(Packed(g, first), bytes, StateArrayBytes(ctx_->config, 1, n));
          return absl::OkStatus();
        });
  }
  float* b = Array(g, array);
  if (b == nullptr) return absl::InvalidArgumentError("write_owned_state: no such state");
  // Aliased: this rank's working copy of these elements changes with it.
  mem_->UploadF32(in, b + begin, DType::kF32, len);
  return absl::OkStatus();
}

absl::StatusOr<const float*> DeviceStateStore::MasterOnDevice(int g, int64_t begin,
                                                              int64_t len, DeviceBuffer*) {
  return Array(g, 0) + begin;
}

absl::Status DeviceStateStore::CastMaster(int g, void* dst) {
  // Aliased, into the working copy: already there.
  if (dst == Array(g, 0)) return absl::OkStatus();
  ctx_->device->FromF32(Array(g, 0), dst, ctx_->dtype(), groups_[g].len);
  return absl::OkStatus();
}

float* DeviceStateStore::InMemory(int g, int array) { return Array(g, array); }

absl::Status DeviceStateStore::Materialize() {
  if (!packed_) return absl::OkStatus();
  for (size_t g = 0; g < groups_.size(); ++g) {
    Arrays& s = groups_[g];
    if (s.unpacked[0].bytes() > 0) continue;
    std::vector<float> host(s.len);
    for (int k = 0; k < 2; ++k) {
      RETURN_IF_ERROR(Read(static_cast<int>(g), k + 1, 0, s.len, host.data()));
      ASSIGN_OR_RETURN(s.unpacked[k], DeviceBuffer::Make(mem_, std::max<int64_t>(1, s.len) * 4));
      mem_->Copy(s.unpacked[k].data(), host.data(), s.len * 4);
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceStateStore::Spill(bool write_back) {
  if (!packed_) return absl::OkStatus();
  for (size_t g = 0; g < groups_.size(); ++g) {
    Arrays& s = groups_[g];
    if (s.unpacked[0].bytes() == 0) continue;
    if (write_back) {
      std::vector<float> m(s.len), v(s.len);
      mem_->Copy(m.data(), s.unpacked[0].data(), s.len * 4);
      mem_->Copy(v.data(), s.unpacked[1].data(), s.len * 4);
      std::vector<char> bytes(StateArrayBytes(ctx_->config, 1, s.len));
      cpu::PackMoments(PackedFormat(ctx_->config), m.data(), v.data(), bytes.data(), s.len);
      mem_->Copy(Packed(static_cast<int>(g), 0), bytes.data(), bytes.size());
    }
    s.unpacked[0] = DeviceBuffer();
    s.unpacked[1] = DeviceBuffer();
  }
  return absl::OkStatus();
}

StateStoreStats DeviceStateStore::stats() const {
  StateStoreStats s;
  for (const Arrays& g : groups_) {
    s.master_bytes += g.a[0].bytes();  // 0 when aliased: the working copy's bytes
    s.optimizer_bytes += g.a[1].bytes() + g.a[2].bytes();
  }
  return s;
}

}  // namespace zero
